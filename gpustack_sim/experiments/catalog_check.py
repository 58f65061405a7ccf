"""`gpustack check` also checks the preregistered protocols in experiments/ beside the catalog. The
findings are cached in the build directory by the content of everything they depend on, so a warm
check reads them back without building a protocol model."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from gpustack_compiler.base.atomic import write_text
from gpustack_compiler.base.fileset import content_hash
from gpustack_compiler.base.findings import Findings, Level


def protocol_findings(catalog: Path, build: Path | None, catalog_result) -> Findings:
    """Findings for every protocol; the unit checks need the catalog's unit system, so with catalog errors
    the protocols are checked without them (and a warning says so)."""
    root = Path(catalog).resolve().parent
    experiments = root / "experiments"
    if not (experiments / "protocols").is_dir():
        return Findings()
    cached = None if build is None else Path(build) / "cache" / f"protocols-{_key(root, catalog_result)}.json"
    if cached is not None and cached.is_file():
        try:
            return Findings.from_dicts(json.loads(cached.read_text(encoding="utf-8")))
        except (OSError, ValueError, KeyError, TypeError):
            pass  # a damaged cache is checked again
    out = _check(catalog, build, catalog_result, experiments)
    if cached is not None:
        for old in cached.parent.glob("protocols-*.json"):
            old.unlink(missing_ok=True)
        write_text(cached, json.dumps([f.to_dict() for f in out.items]))
    return out


def _key(root: Path, catalog_result) -> str:
    """What the findings depend on: the experiments folder (protocols, lock, scenario files), the run
    files a protocol may name, and the catalog (its units, and whether it has errors)."""
    h = hashlib.sha256(f"{catalog_result.catalog_hash}\0{bool(catalog_result.findings.errors)}".encode())
    lock = root / "experiments" / "protocols.lock"
    h.update(lock.read_bytes() if lock.is_file() else b"")
    for folder in ("experiments", "runs"):
        if (root / folder).is_dir():
            h.update(f"{folder}\0{content_hash(root / folder)[0]}".encode())
    return h.hexdigest()[:32]


def _check(catalog: Path, build: Path | None, catalog_result, experiments: Path) -> Findings:
    from .status import findings
    from .workspace import Workspace

    ws = Workspace.at(experiments)
    units = None
    if not catalog_result.findings.errors:
        from gpustack_compiler.build import pipeline
        from gpustack_compiler.language.units import UnitSystem

        compiled = pipeline.run(Path(catalog), build, write_manifest=False)
        if compiled.manifest is not None:
            units = UnitSystem.from_manifest(compiled.manifest["units"])
    out = findings(ws, units)
    if units is None:
        out.add(ws.shown(ws.protocols_dir), 1, "experiment.units-unchecked",
                "protocol units not checked: the catalog has errors", level=Level.WARNING)
    return out
