"""The observatory: a static, self-contained site built from the manifest and the artifacts (estimates of
run files, simulation outputs, experiment results). No CDN and no server: it opens from file://.

    from gpustack_sim import Engine
    from gpustack_sim.observatory import build_site
    report = build_site(Engine.open("catalog"), "site", runs=["runs/llama70b_1024xh100.yaml"])
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from gpustack_compiler.base.errors import GpustackError, InputError


@dataclass(frozen=True)
class SiteReport:
    out: str
    files: tuple[str, ...]
    digest: str  # SHA-256 over every file's path and bytes: equal digests, identical sites
    runs: int
    simulations: int
    experiments: int
    skipped: tuple[tuple[str, str], ...] = ()  # (what, why) left out of the site, also listed on its front page

    def to_dict(self) -> dict:
        return {"out": self.out, "files": len(self.files), "digest": self.digest, "runs": self.runs,
                "simulations": self.simulations, "experiments": self.experiments,
                "skipped": [{"what": w, "why": y} for w, y in self.skipped]}


def build_site(engine, out: str | Path, runs: Sequence[str | Path] = (), simulations: Sequence[str | Path] = (),
               simulate_runs: Sequence[str | Path] = (), experiments: str | Path | None = None,
               replications: int = 3, samples: int = 10000, seed: int = 0, home: str | Path | None = None) -> SiteReport:
    """Write the site to `out` (a new or empty folder, or a site built before): a page per run file
    (estimate, step-time waterfall, cost breakdown, traces), a page per simulation (folders written by
    `gpustack simulate --out`, and run files in `simulate_runs` replayed here with `replications`), the
    experiments folder's protocols and results, and the cone explorer over the whole catalog. Files are
    named on the pages relative to `home` (the repository), so the site does not depend on where it is."""
    from .collect import (
        Observatory,
        catalog_data,
        experiments_data,
        run_view,
        simulation_from_engine,
        simulation_from_folder,
    )
    from .render import check_out, write

    manifest = getattr(engine.source, "manifest", None)
    if manifest is None:
        raise InputError("the observatory is built from the compiled manifest, not from Neo4j", "drop --neo4j")
    for p in [*runs, *simulate_runs]:
        if not Path(p).is_file():
            raise InputError(f"run file {p} not found")
    check_out(Path(out))  # before any estimate or replay
    catalog, debt = catalog_data(manifest, engine.source)
    obs = Observatory(catalog, debt, engine.facts.breakdowns)
    if experiments is not None:
        # Read first: a folder that is not there, or holds no protocol, is refused before any estimate runs.
        if not Path(experiments).is_dir():
            raise InputError(f"experiments folder {experiments} not found")
        obs.experiments = experiments_data(Path(experiments), engine.units)
        if not obs.experiments:
            raise InputError(f"experiments folder {experiments}: no protocols in it")
    base = Path(home).resolve() if home is not None else Path.cwd()

    def shown(p) -> str:
        path = Path(p).resolve()
        return path.relative_to(base).as_posix() if path.is_relative_to(base) else path.name

    obs.runs = [run_view(engine, Path(p), shown(p), samples, seed) for p in runs]
    obs.simulations = [simulation_from_folder(Path(p), shown(p)) for p in simulations]
    for p in simulate_runs:
        try:
            obs.simulations.append(simulation_from_engine(engine, Path(p), shown(p), replications, seed))
        except GpustackError as exc:
            # A run the datacenter cannot replay yet (a checkpoint time with no source, say) is named with
            # the reason on the front page; the rest of the site is still built.
            obs.skipped.append((f"simulation of {shown(p)}", str(exc)))
    root = Path(out)
    files = write(obs, root, manifest.get("catalog_hash", ""))
    digest = hashlib.sha256()
    for rel in sorted(files):
        digest.update(rel.encode() + b"\0" + (root / rel).read_bytes() + b"\0")
    return SiteReport(root.as_posix(), tuple(files), digest.hexdigest(), len(obs.runs), len(obs.simulations),
                      len(obs.experiments), tuple(obs.skipped))
