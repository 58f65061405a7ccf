"""A serving replay's figures over replications (SLO attainment, latency percentiles, tokens served, energy
per token, cost per million tokens), and its per-request log and plot, rendered in one place."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .fleet import FleetRun

FIGURES = {
    "slo_attainment": ("SLO attainment (TTFT and TPOT)", "1", 1.0),
    "ttft_p50_s": ("TTFT p50", "s", 1.0), "ttft_p99_s": ("TTFT p99", "s", 1.0),
    "tpot_p50_s": ("TPOT p50", "ms/token", 1e-3), "tpot_p99_s": ("TPOT p99", "ms/token", 1e-3),
    "e2e_p50_s": ("end-to-end latency p50", "s", 1.0), "e2e_p99_s": ("end-to-end latency p99", "s", 1.0),
    "tokens_served": ("output tokens served", "token", 1.0),
    "energy_per_token_j": ("energy per output token", "J/token", 1.0),
    "cost_per_mtoken_usd": ("cost per million output tokens", "USD/Mtoken", 1.0),
    "mean_power_w": ("mean facility power", "kW", 1e3),
    "completed_share": ("requests completed", "1", 1.0),
}


def run_figures(run: FleetRun, horizon_s: float) -> dict[str, float]:
    """One replication's figures. A request not finished by the horizon misses its SLO."""
    r, log = run.requests, run.log
    done = ~np.isnan(log.finish_s)
    ttft = log.first_token_s - r.arrival_s
    out = r.output_tokens
    tpot = np.where(out > 1, (log.finish_s - log.first_token_s) / np.maximum(1, out - 1), 0.0)
    e2e = log.finish_s - r.arrival_s
    meets = done & (ttft <= run.ttft_objective_s) & (tpot <= run.tpot_objective_s)
    tokens = float(out[done].sum())
    pct = (lambda a, q: float(np.percentile(a[done], q)) if done.any() else math.nan)
    return {
        "slo_attainment": float(meets.mean()) if len(r) else math.nan,
        "ttft_p50_s": pct(ttft, 50), "ttft_p99_s": pct(ttft, 99),
        "tpot_p50_s": pct(tpot, 50), "tpot_p99_s": pct(tpot, 99),
        "e2e_p50_s": pct(e2e, 50), "e2e_p99_s": pct(e2e, 99),
        "tokens_served": tokens,
        "energy_per_token_j": run.energy_j / tokens if tokens else math.nan,
        "cost_per_mtoken_usd": run.gpu_seconds * run.gpu_hour_cost / tokens * 1e6 if tokens else math.nan,
        "mean_power_w": run.energy_j / horizon_s,
        "completed_share": float(done.mean()) if len(r) else math.nan,
    }


@dataclass(frozen=True)
class Stat:
    mean: float
    p5: float
    p95: float
    half_width_95: float  # half-width of the mean's 95% interval, normal approximation (0 for one replication)


@dataclass
class ServingResult:
    run_name: str
    family: str
    routing: str
    seed: int
    hours: float
    replications: int
    replicas: int
    gpus: int
    sites: tuple[str, ...]
    figures: dict[str, Stat]
    notes: list[str] = field(default_factory=list)
    logged: FleetRun | None = None  # the first replication, for the log and the plot

    @classmethod
    def from_runs(cls, runs: list[FleetRun], horizon_s: float, **kw) -> ServingResult:
        per = [run_figures(r, horizon_s) for r in runs]
        figures = {k: _stat([p[k] for p in per]) for k in FIGURES}
        return cls(figures=figures, replications=len(runs), logged=runs[0], **kw)

    def to_dict(self) -> dict:
        return {"run": self.run_name, "family": self.family, "routing": self.routing, "seed": self.seed,
                "hours": self.hours, "replications": self.replications, "replicas": self.replicas,
                "gpus": self.gpus, "sites": list(self.sites), "notes": self.notes,
                "figures": {k: {"mean": s.mean, "p5": s.p5, "p95": s.p95, "half_width_95": s.half_width_95}
                            for k, s in self.figures.items()}}

    def lines(self) -> list[str]:
        head = (f"serving replay of {self.run_name}: {self.family} arrivals, {self.hours:g} h, {self.replicas} "
                f"replicas ({self.gpus} GPUs) over {', '.join(self.sites)}, routing {self.routing}, "
                f"{self.replications} replication(s), seed {self.seed}")
        rows = []
        for key, (label, units, scale) in FIGURES.items():
            s = self.figures[key]
            rows.append(f"  {label:<32} {s.mean / scale:.6g} {units}   [p5 {s.p5 / scale:.6g}, "
                        f"p95 {s.p95 / scale:.6g}; mean +- {s.half_width_95 / scale:.3g} (95%)]")
        return [head, *rows, *(f"note: {n}" for n in self.notes)]

    def write_log(self, path: Path) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        run = self.logged
        r, log = run.requests, run.log
        table = pa.table({
            "request": np.arange(len(r), dtype=np.int64), "arrival_s": r.arrival_s,
            "input_tokens": r.input_tokens, "output_tokens": r.output_tokens, "replica": log.replica,
            "first_token_s": log.first_token_s, "finish_s": log.finish_s, "preemptions": log.preemptions,
            "migrations": log.migrations, "sheddable": r.sheddable, "rejected": log.rejected})
        pq.write_table(table, path, compression="zstd")

    def write_plot(self, path: Path) -> None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        run = self.logged
        r, log = run.requests, run.log
        fig, ax = plt.subplots(3, 1, figsize=(9, 8), sharex=True)
        minutes = r.arrival_s / 60
        ax[0].scatter(minutes, log.first_token_s - r.arrival_s, s=1, alpha=0.3, label="TTFT")
        ax[0].axhline(run.ttft_objective_s, color="k", lw=0.8, ls="--", label="TTFT objective")
        ax[0].set_yscale("log")
        ax[0].set_ylabel("TTFT (s)")
        ax[0].legend(loc="upper right", fontsize=8)
        t = (np.arange(len(run.queued)) + 0.5) * run.tick_s / 60
        ax[1].plot(t, run.queued, lw=0.8, label="requests in the fleet")
        ax[1].set_ylabel("requests")
        ax2 = ax[1].twinx()
        ax2.plot(t, run.kv_share, lw=0.8, color="tab:orange", label="KV cache used")
        ax2.set_ylabel("KV share")
        for k in range(run.site_power_w.shape[1]):
            ax[2].plot(t, run.site_power_w[:, k] / 1e3, lw=0.8, label=self.sites[k] if k < len(self.sites) else str(k))
        ax[2].set_ylabel("facility power (kW)")
        ax[2].set_xlabel("minutes")
        ax[2].legend(loc="upper right", fontsize=8)
        fig.suptitle(f"{self.run_name}: {self.family}, routing {self.routing}")
        fig.tight_layout()
        fig.savefig(path, dpi=110, metadata={"Software": None})
        plt.close(fig)


def _stat(values: list[float]) -> Stat:
    a = np.asarray(values, dtype=float)
    a = a[np.isfinite(a)]
    if not len(a):
        return Stat(math.nan, math.nan, math.nan, math.nan)
    # The normal approximation of the mean's 95% interval over replications (none for one replication).
    hw = float(1.96 * a.std(ddof=1) / math.sqrt(len(a))) if len(a) > 1 else 0.0
    return Stat(float(a.mean()), float(np.percentile(a, 5)), float(np.percentile(a, 95)), hw)
