"""Figures over replications (mean, p5/p50/p95, standard error), the event log, and its artifacts.

Artifacts are written to a temporary file in the target folder and renamed into place, so a failure
never leaves half a file behind."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from gpustack_compiler.base.atomic import digests, write_atomic, write_folder
from gpustack_compiler.base.errors import InputError

from .events import NS_PER_S, to_ns
from .parameters import JobParameters
from .power import PowerSeries, power_series
from .simulation import PHASES, Piece, Replication, phase_powers
from .sites import Placement

SECONDS_PER_HOUR = 3600

# Columns of the event log (docs/datacenter.md describes each).
LOG_COLUMNS = {"replication": "int32", "time_ns": "int64", "priority": "int8", "kind": "string", "seq": "int64",
               "cause": "string", "position": "int64", "count": "int64", "duration_ns": "int64", "nodes": "int32",
               "site": "string"}
# Columns of the power series file, one row per site and time bin.
POWER_COLUMNS = ("site", "start_s", "width_s") + tuple(f"{ph}_w" for ph in PHASES)


@dataclass(frozen=True)
class Stat:
    mean: float
    p5: float
    p50: float
    p95: float
    stderr: float

    @classmethod
    def of(cls, values) -> Stat:
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
    sites: tuple[str, ...] = ()  # every site the job could use (the sites file's), in order
    pieces: tuple[tuple[Piece, ...], ...] = ()  # per logged replication: what the power series is built from
    wallclocks_ns: tuple[int, ...] = ()  # per logged replication
    energy_by_site_j: dict[str, Stat] = field(default_factory=dict)  # node IT energy per site (with a known power)

    @classmethod
    def from_replications(cls, params: JobParameters, placement: Placement, policy: str, seed: int,
                          days: float | None, runs: list[Replication],
                          layouts: dict[str, JobParameters] | None = None) -> SimulationResult:
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
        logged = [r for r in runs if r.pieces]
        causes = sorted({c for r in runs for c in r.interruptions})
        by_cause = {c: Stat.of([r.interruptions.get(c, 0) for r in runs]) for c in causes}
        work = {"attempted_steps": sum(r.attempted_steps for r in runs), "useful_steps": sum(r.useful_steps for r in runs),
                "lost_steps": sum(r.lost_steps for r in runs),
                "unbalanced_replications": sum(r.attempted_steps != r.useful_steps + r.lost_steps for r in runs)}
        log = tuple({"replication": i, **row} for i, r in enumerate(runs) for row in r.log)
        return cls(policy, seed, len(runs), days, params.total_steps, placement.placed, figures, by_cause, work,
                   min(r.tokens for r in runs), max(r.tokens for r in runs),
                   _excluded([params, *(layouts or {}).values()]), tuple(sorted({n for r in runs for n in r.notes})),
                   log, tuple(r.failure_times_ns for r in runs), params,
                   tuple(s.name for s in placement.sites.sites) if placement.sites else tuple(n for n, _ in placement.placed),
                   tuple(r.pieces for r in logged), tuple(r.wallclock_ns for r in logged),
                   {site: Stat.of([sum(r.energy_j[site].values()) for r in runs]) for site in runs[0].energy_j}
                   if "energy_j" in figures else {})

    def to_dict(self) -> dict:
        return {"policy": self.policy, "seed": self.seed, "replications": self.replications, "days": self.days,
                "total_steps": self.total_steps, "placement": [list(p) for p in self.placement],
                "figures": {k: v.to_dict() for k, v in self.figures.items()},
                "interruptions_by_cause": {k: v.to_dict() for k, v in self.interruptions_by_cause.items()},
                "energy_by_site_j": {k: v.to_dict() for k, v in self.energy_by_site_j.items()},
                "work": self.work, "tokens": {"min": self.tokens_min, "max": self.tokens_max},
                "excluded": list(self.excluded), "notes": list(self.notes), "log_rows": len(self.log)}

    def write_parquet(self, path: Path) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = pa.table({name: pa.array([row[name] for row in self.log], type=pa.from_numpy_dtype(np.dtype(t))
                                         if t != "string" else pa.string()) for name, t in LOG_COLUMNS.items()})
        write_atomic(path, lambda tmp: pq.write_table(table, tmp, compression="zstd"))

    def power_series(self, site: str, resolution_s: float, window: tuple[float, float] | None = None,
                     replication: int = 0) -> PowerSeries:
        """The job's node IT power at `site` by phase (compute, communication, checkpoint, idle, recovery) in
        bins of `resolution_s` over `window` (seconds since the start; default the whole replication), for one
        of the logged replications. Its integral is the replication's energy at the site; phases without a catalog
        node power are NaN where they run (`PowerSeries.undefined`)."""
        if site not in self.sites:
            raise InputError(f"power series: no site {site!r} (sites: {', '.join(self.sites)})")
        if not 0 <= replication < len(self.pieces):
            raise InputError(f"power series: replication {replication} was not logged "
                             f"({len(self.pieces)} logged; simulate(log_replications=))")
        w0, w1 = (0, self.wallclocks_ns[replication]) if window is None else (to_ns(window[0]), to_ns(window[1]))
        if not 0 <= w0 < w1:
            raise InputError(f"power series: window {window!r} is not an interval from 0 s on")
        return power_series(self.pieces[replication], site, resolution_s, (w0, w1))

    def default_resolution_s(self, replication: int = 0) -> float:
        """A resolution giving about a thousand bins over the replication, in whole seconds."""
        if not 0 <= replication < len(self.wallclocks_ns):
            raise InputError(f"replication {replication} was not logged ({len(self.wallclocks_ns)} logged; "
                             "simulate(log_replications=))")
        return float(max(1, -(-self.wallclocks_ns[replication] // (1000 * NS_PER_S))))

    def write_power_parquet(self, path: Path, resolution_s: float | None = None) -> None:
        """The power series of every site the job used, for the first logged replication."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        res = resolution_s if resolution_s is not None else self.default_resolution_s()
        cols: dict[str, list] = {c: [] for c in POWER_COLUMNS}
        for site in self.sites:
            series = self.power_series(site, res)
            if not any(v.any() for v in series.node_s.values()):
                continue
            cols["site"] += [site] * len(series.start_s)
            cols["start_s"] += series.start_s.tolist()
            cols["width_s"] += series.width_s.tolist()
            for ph in PHASES:
                cols[f"{ph}_w"] += series.power_w[ph].tolist()
        table = pa.table({c: pa.array(v, type=pa.string() if c == "site" else pa.float64()) for c, v in cols.items()})
        write_atomic(path, lambda tmp: pq.write_table(table, tmp, compression="zstd"))

    def write_timeline_png(self, path: Path) -> None:
        from .timeline import draw_timeline

        write_atomic(path, lambda tmp: draw_timeline(self, tmp))

    def write_folder(self, out: Path, summary: dict, resolution_s: float | None = None) -> None:
        """`gpustack simulate --out`: result.json (`summary`, and the sha256 of each of FOLDER_FILES, so a reader
        can tell a whole folder from a mix of two runs) beside the event log, the power series and the
        timeline. The folder replaces `out` whole (gpustack_compiler.base.atomic.write_folder)."""
        def fill(tmp: Path) -> None:
            self.write_parquet(tmp / "events.parquet")
            self.write_power_parquet(tmp / "power.parquet", resolution_s)
            self.write_timeline_png(tmp / "timeline.png")
            text = json.dumps({**summary, "files": digests(tmp, FOLDER_FILES)}, indent=2, sort_keys=True,
                              default=str, allow_nan=False)
            (tmp / "result.json").write_text(text + "\n", encoding="utf-8")

        write_folder(out, fill)


# The files a simulation folder holds beside result.json, which records their digests.
FOLDER_FILES = ("events.parquet", "power.parquet", "timeline.png")


def _excluded(variants: list[JobParameters]) -> tuple[str, ...]:
    params = variants[0]
    out = [f"failure class {n}: no sourced rate in the scenario, not simulated" for n in params.excluded_failure_classes]
    unknown = [ph for i, ph in enumerate(PHASES) if any(phase_powers(v)[i] is None for v in variants)]
    out += [f"energy of the {ph} phase: no catalog node power for it (its power series is undefined where it runs)"
            for ph in unknown]
    if not unknown:
        out.append("the host's extra draw while it serialises and writes checkpoint shards, and GPU power states "
                   "below P0 in a long recovery: not modelled (those phases draw the nodes' waiting power)")
    out += ["energy of the fabric switches, storage servers and cooling: not modelled (node IT power only)",
            "node repair: the catalog has no repair time, so failed nodes are not repaired within the run (a "
            "replacement comes from the spares, or after cluster.sched.t_requeue without one)"]
    return tuple(out)
