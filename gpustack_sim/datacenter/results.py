"""Figures over replications (mean, p5/p50/p95, standard error), the event log, and its artifacts.

Artifacts are written to a temporary file in the target folder and renamed into place, so a failure
never leaves half a file behind."""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .events import NS_PER_S
from .parameters import JobParameters
from .simulation import PHASES, Replication
from .sites import Placement

SECONDS_PER_HOUR = 3600

# Columns of the event log (docs/datacenter.md describes each).
LOG_COLUMNS = {"replication": "int32", "time_ns": "int64", "priority": "int8", "kind": "string", "seq": "int64",
               "cause": "string", "position": "int64", "count": "int64", "duration_ns": "int64", "nodes": "int32"}


@dataclass(frozen=True)
class Stat:
    mean: float
    p5: float
    p50: float
    p95: float
    stderr: float

    @classmethod
    def of(cls, values) -> "Stat":
        a = np.asarray(values, dtype=float)
        p5, p50, p95 = np.percentile(a, [5, 50, 95])
        err = float(a.std(ddof=1) / np.sqrt(len(a))) if len(a) > 1 else 0.0
        return cls(float(a.mean()), float(p5), float(p50), float(p95), err)

    def to_dict(self) -> dict:
        return {"mean": self.mean, "p5": self.p5, "p50": self.p50, "p95": self.p95, "stderr": self.stderr}


@dataclass(frozen=True)
class SimulationResult:
    policy: str
    seed: int
    replications: int
    days: float | None
    total_steps: int
    placement: tuple[tuple[str, int], ...]
    figures: dict[str, Stat]
    interruptions_by_cause: dict[str, Stat]
    work: dict[str, int]  # summed over replications: attempted, useful, lost steps; failures of conservation
    tokens_min: int
    tokens_max: int
    excluded: tuple[str, ...]
    notes: tuple[str, ...]
    log: tuple[dict, ...]
    failure_times_ns: tuple[tuple[int, ...], ...]
    parameters: JobParameters

    @classmethod
    def from_replications(cls, params: JobParameters, placement: Placement, policy: str, seed: int,
                          days: float | None, runs: list[Replication]) -> "SimulationResult":
        wall = np.array([r.wallclock_ns for r in runs], dtype=float)
        energy = [sum(sum(ph.values()) for ph in r.energy_j.values()) for r in runs]
        figures = {
            "useful_time_share": Stat.of(np.array([r.useful_ns for r in runs]) / wall),
            "wallclock_s": Stat.of(wall / NS_PER_S),
            "interruptions": Stat.of([sum(r.interruptions.values()) for r in runs]),
            "lost_gpu_hours": Stat.of([r.lost_gpu_hours for r in runs]),
            "checkpoint_overhead_share": Stat.of(np.array([r.phase_ns["checkpoint"] for r in runs]) / wall),
            "checkpoints_completed": Stat.of([r.checkpoints_completed for r in runs]),
            "tokens": Stat.of([r.tokens for r in runs]),
        }
        if params.node_power_compute_w is not None:
            figures["energy_j"] = Stat.of(energy)
        causes = sorted({c for r in runs for c in r.interruptions})
        by_cause = {c: Stat.of([r.interruptions.get(c, 0) for r in runs]) for c in causes}
        work = {"attempted_steps": sum(r.attempted_steps for r in runs), "useful_steps": sum(r.useful_steps for r in runs),
                "lost_steps": sum(r.lost_steps for r in runs),
                "unbalanced_replications": sum(r.attempted_steps != r.useful_steps + r.lost_steps for r in runs)}
        log = tuple({"replication": i, **row} for i, r in enumerate(runs) for row in r.log)
        return cls(policy, seed, len(runs), days, params.total_steps, placement.placed, figures, by_cause, work,
                   min(r.tokens for r in runs), max(r.tokens for r in runs), _excluded(params),
                   tuple(sorted({n for r in runs for n in r.notes})), log,
                   tuple(r.failure_times_ns for r in runs), params)

    def to_dict(self) -> dict:
        return {"policy": self.policy, "seed": self.seed, "replications": self.replications, "days": self.days,
                "total_steps": self.total_steps, "placement": [list(p) for p in self.placement],
                "figures": {k: v.to_dict() for k, v in self.figures.items()},
                "interruptions_by_cause": {k: v.to_dict() for k, v in self.interruptions_by_cause.items()},
                "work": self.work, "tokens": {"min": self.tokens_min, "max": self.tokens_max},
                "excluded": list(self.excluded), "notes": list(self.notes), "log_rows": len(self.log)}

    def write_parquet(self, path: Path) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = pa.table({name: pa.array([row[name] for row in self.log], type=pa.from_numpy_dtype(np.dtype(t))
                                         if t != "string" else pa.string()) for name, t in LOG_COLUMNS.items()})
        write_atomic(path, lambda tmp: pq.write_table(table, tmp, compression="zstd"))

    def write_timeline_png(self, path: Path) -> None:
        from .timeline import draw_timeline

        rows = [r for r in self.log if r["replication"] == 0]
        write_atomic(path, lambda tmp: draw_timeline(rows, self.parameters, tmp))


def _excluded(params: JobParameters) -> tuple[str, ...]:
    out = [f"failure class {n}: no sourced rate in the scenario, not simulated" for n in params.excluded_failure_classes]
    unknown = [ph for ph, w in zip(PHASES, (params.node_power_compute_w, params.node_power_communication_w,
                                            params.node_power_checkpoint_w, params.node_power_idle_w)) if w is None]
    out += [f"energy of the {ph} phase: no catalog node power for it" for ph in unknown]
    out += ["energy of the fabric switches, storage servers and cooling: not modelled (node IT power only)"]
    return tuple(out)


def write_atomic(path: Path, write) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    os.close(fd)
    try:
        write(tmp)
        os.chmod(tmp, 0o644)  # mkstemp makes it private; an artifact is meant to be shared
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
