"""The local learning workload end to end: read the config, train every condition at every seed, then write
the curves (content-addressed JSON under OUT/learning/, wallclock apart under OUT/learning/wallclock/) and
one observation per condition to OUT/observations/PANEL.yaml. Nothing is written until every run is done
and the observations have passed their schema."""

from __future__ import annotations

import hashlib
import os
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from .config import LearnConfig, load_config
from .corpus import Corpus, load_corpus
from .observe import Provenance, canonical, code_sha256, curve_document, machine, observation, software
from .train import SeedRun, run_seed

HEADER = """# yaml-language-server: $schema=../../schemas/observations.schema.json
# Written by `gpustack learn {config}`: the local learning workload (gpustack_sim/learning/README.md). One row
# per condition, the mean held-out loss over seeds with two standard errors either side; each seed's curve is
# the content-addressed JSON it names. The split is fixed by the condition id (held out in the config, or by
# the id's hash) before any fit. A row marked `inadmissible` is kept and locked but never fitted or scored.
# {honesty}
"""


@dataclass
class Measurement:
    cfg: LearnConfig
    config_path: Path
    corpus: Corpus
    corpus_path: Path
    runs: dict[str, list[SeedRun]]
    seconds: float
    provenance: Provenance  # taken before training: the code and catalog that ran, not what is on disk later


def _relative(path: Path) -> str:
    """The path relative to the working directory (the repository) when it is inside it."""
    try:
        return path.resolve().relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return path.as_posix()


def measure(config_path: Path, progress=None) -> Measurement:
    cfg, corpus_path = load_config(config_path)
    corpus = load_corpus(corpus_path, cfg.holdout_fraction, cfg.model.context)
    prov = provenance(config_path, corpus_path, corpus)
    start = time.perf_counter()
    runs: dict[str, list[SeedRun]] = {}
    for cond in cfg.conditions:
        runs[cond.id] = []
        for seed in cfg.seeds:
            run = run_seed(cfg, corpus, cond, seed)
            runs[cond.id].append(run)
            if progress:
                progress(cond.id, seed, run)
    return Measurement(cfg, config_path, corpus, corpus_path, runs, time.perf_counter() - start, prov)


def provenance(config_path: Path, corpus_path: Path, corpus: Corpus) -> Provenance:
    from gpustack_compiler.base.fileset import content_hash

    from ..compiled import default_catalog

    return Provenance(config=_relative(config_path),
                      config_sha256=hashlib.sha256(config_path.read_bytes()).hexdigest(),
                      code_sha256=code_sha256(), catalog_sha256=content_hash(default_catalog())[0],
                      corpus=_relative(corpus_path), corpus_sha256=corpus.sha256, machine=machine(),
                      software=software())


def write(m: Measurement, out: Path) -> dict:
    """Write curves, wallclock and observations under `out`; returns what was written."""
    from gpustack_compiler.base.documents import validate

    from ..engine.observation import ObservationFile
    from .observe import HONESTY

    prov = m.provenance
    curves: dict[str, bytes] = {}
    wallclock: dict[str, bytes] = {}
    rows = []
    load = os.getloadavg()
    for cond in m.cfg.conditions:
        paths = []
        for run in m.runs[cond.id]:
            body = canonical(curve_document(run, cond, prov.config_sha256, prov.corpus_sha256))
            digest = hashlib.sha256(body).hexdigest()
            curves[digest] = body
            wallclock[digest] = canonical({"curve": digest, "seconds": run.seconds, "machine": prov.machine,
                                           "load_average_1_5_15_min": list(load),
                                           "note": "measured wallclock: not part of any content hash"})
            paths.append(f"../learning/{digest}.json")
        rows.append(observation(m.cfg, cond, m.runs[cond.id], paths, prov, m.cfg.panel))
    doc = {"observations": rows}
    validate(ObservationFile, doc, f"{m.cfg.panel} observations")  # a row the schema refuses is a bug here
    obs_path = out / "observations" / f"{m.cfg.panel}.yaml"
    text = HEADER.format(config=prov.config, honesty=HONESTY) + yaml.safe_dump(doc, sort_keys=False, width=120)
    (out / "learning" / "wallclock").mkdir(parents=True, exist_ok=True)
    obs_path.parent.mkdir(parents=True, exist_ok=True)
    for digest, body in curves.items():
        (out / "learning" / f"{digest}.json").write_bytes(body)
        (out / "learning" / "wallclock" / f"{digest}.json").write_bytes(wallclock[digest])
    obs_path.write_text(text, encoding="utf-8")
    return {"observations": str(obs_path), "curves": sorted(curves), "rows": rows}

