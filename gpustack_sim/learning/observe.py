"""Measurements as evidence: each seed's curve as content-addressed JSON, and per condition one observation
(schemas/observations.schema.json, a `learning` setup) with the mean over seeds, the seed spread, its
provenance, a calibration/evaluation split fixed by the condition's id before any fit, and, where the
admissibility check fails, the reason it is recorded but never fitted to or scored."""

from __future__ import annotations

import hashlib
import json
import math
import os
import platform
import sys
from dataclasses import dataclass
from pathlib import Path

from .config import Condition, LearnConfig
from .train import SeedRun

PANEL_PREFIX = "local_learning"
REFERENCE = "gpustack_local_learning"
HONESTY = ("Measured on a local small model (byte-level decoder-only transformer on this machine's CPUs); "
           "it calibrates the learning model for such models only and says nothing about frontier-scale runs.")
EVALUATION_BUCKETS = 4  # about one condition in four is held out by the id rule


def split_of(cond_id: str, hold_out: list[str]) -> str:
    """Evaluation if the config holds the condition out whole, or if its id's hash falls in the evaluation
    bucket: a rule on the id alone, fixed before anything is measured or fitted."""
    if cond_id in hold_out:
        return "evaluation"
    bucket = int(hashlib.sha256(cond_id.encode()).hexdigest()[:8], 16) % EVALUATION_BUCKETS
    return "evaluation" if bucket == 0 else "calibration"


def canonical(data) -> bytes:
    return (json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=True) + "\n").encode()


def curve_document(run: SeedRun, cond: Condition, config_sha256: str, corpus_sha256: str) -> dict:
    return {"format": 1, "condition": cond.id, "seed": run.seed, "method": cond.outer.method,
            "replicas": cond.replicas, "local_steps": cond.local_steps, "faults": cond.faults.model_dump(),
            "params_non_embedding": run.params_non_embedding, "flops_per_token": run.flops_per_token,
            "token_budget": run.token_budget, "events": run.events, "diverged": run.diverged,
            "config_sha256": config_sha256, "corpus_sha256": corpus_sha256, "points": run.points, "note": HONESTY}


def admissibility(cfg: LearnConfig, runs: list[SeedRun]) -> str | None:
    """Why this condition's measurement may not be used, or None. Diverged: a loss that is not finite or
    ends above where it started; too few seeds; fewer evaluations per curve than the cadence requires."""
    reasons = []
    for r in runs:
        if r.diverged:
            reasons.append(f"seed {r.seed} diverged: {r.diverged}")
        elif r.final_loss > r.initial_loss:
            reasons.append(f"seed {r.seed} diverged: final loss {r.final_loss:.4f} above its initial "
                           f"{r.initial_loss:.4f} nat/token")
    if len(runs) < cfg.admissibility.min_seeds:
        reasons.append(f"{len(runs)} seed(s), the config requires {cfg.admissibility.min_seeds}")
    sparse = [r for r in runs if len(r.points) < cfg.admissibility.min_points]
    if sparse:
        reasons.append(f"sampling cadence: seed {sparse[0].seed} has {len(sparse[0].points)} evaluations, the "
                       f"config requires {cfg.admissibility.min_points}")
    return "; ".join(reasons) or None


def seed_spread(values: list[float]) -> tuple[float, float, float]:
    """Mean and mean -/+ two standard errors (the sample standard deviation over sqrt(seeds))."""
    n = len(values)
    mean = math.fsum(values) / n
    if n < 2:
        return mean, mean, mean
    se = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (n - 1) / n)
    return mean, mean - 2 * se, mean + 2 * se


def assign(cond: Condition, run: SeedRun) -> dict[str, float]:
    f = cond.faults
    return {"learning.model.params": run.params_non_embedding, "learning.tokens": run.token_budget,
            "learning.replicas": cond.replicas, "learning.local_steps": cond.local_steps,
            "learning.outer_lr": cond.outer.lr, "learning.outer_momentum": cond.outer.momentum,
            "learning.fault.rollback_rate": f.rollback_rate, "learning.fault.replay_rate": f.replay_rate,
            "learning.fault.staleness": f.staleness, "learning.fault.corruption_rate": f.corruption_rate,
            "learning.fault.straggler_rate": f.straggler_rate}


@dataclass(frozen=True)
class Provenance:
    config: str
    config_sha256: str
    code_sha256: str
    catalog_sha256: str
    corpus: str
    corpus_sha256: str
    machine: str
    software: str


def code_sha256() -> str:
    """SHA-256 over this subpackage's sources, the code that trained and measured."""
    h = hashlib.sha256()
    for f in sorted(Path(__file__).parent.glob("*.py")):
        h.update(f.name.encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


def machine() -> str:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip() + ", "
                break
    except OSError:
        pass
    return f"{model}{os.cpu_count()} CPUs, {platform.machine()} {platform.system()}"


def software() -> str:
    import jax
    import jaxlib
    import numpy
    import optax

    return (f"Python {sys.version.split()[0]}, jax {jax.__version__}, jaxlib {jaxlib.__version__}, "
            f"optax {optax.__version__}, numpy {numpy.__version__}")


def observation(cfg: LearnConfig, cond: Condition, runs: list[SeedRun], curve_paths: list[str], prov: Provenance,
                panel: str) -> dict:
    """The observation row of one condition, as written to the YAML file."""
    finals = [r.final_loss if math.isfinite(r.final_loss) else _last_finite(r) for r in runs]
    mean, low, high = seed_spread(finals)
    row = {
        "id": f"{panel.replace('_', '-')}-{cond.id}",
        "split": split_of(cond.id, cfg.hold_out),
        "panel": panel,
        "measured": {"value": _round(mean), "units": "nat/token",
                     "uncertainty": {"kind": "seed_spread", "low": _round(min(low, mean)), "high": _round(max(high, mean))}},
        "measures": {"variable": "learning.loss.final"},
        "learning": {"condition": cond.id, "method": cond.outer.method, "assign": assign(cond, runs[0]),
                     "seeds": [r.seed for r in runs], "seed_values": [_round(v) for v in finals],
                     "curves": curve_paths, "provenance": dict(vars(prov))},
        "source": {"reference": REFERENCE, "locator": f"{prov.config}, condition {cond.id}, seeds "
                   f"{', '.join(str(r.seed) for r in runs)}: held-out loss at the end of the token budget",
                   "licence": "Apache-2.0 (this repository); corpus public domain (data/corpus/README.md)",
                   "file": prov.config, "sha256": prov.config_sha256},
        "note": HONESTY,
    }
    reason = admissibility(cfg, runs)
    if reason:
        row["inadmissible"] = reason
    return row


def _last_finite(run: SeedRun) -> float:
    finite = [p["loss"] for p in run.points if math.isfinite(p["loss"])]
    return finite[-1] if finite else run.initial_loss


def _round(x: float) -> float:
    # Six significant digits: the seed spread is far wider, and the YAML stays readable.
    return float(f"{x:.6g}")
