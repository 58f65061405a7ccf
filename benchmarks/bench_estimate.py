"""Benchmarks for estimates, Monte Carlo and sweeps (issue: predict a training run).

Targets: the `gpustack estimate` process in at most 2 s of wall time; 10,000 Monte Carlo samples of
cost per token in at most 1 s. The sweep rows report grid points and model evaluations apart (most grid
points are no layout of the job and never reach the model); benchmarks/bench_sweep.py measures the search
beside Calculon.

    python benchmarks/bench_estimate.py [--run runs/llama70b_1024xh100.yaml]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from cli_process import median_wall

from gpustack_compiler.build import pipeline
from gpustack_compiler.manifest.source import ManifestSource
from gpustack_sim import Engine
from gpustack_sim.analyses.estimate import fitted_distributions
from gpustack_sim.analyses.sweep import parse_grid
from gpustack_sim.analyses.uncertainty import MonteCarlo
from gpustack_sim.engine.run_file import load_run

REPO = Path(__file__).resolve().parent.parent
GRID = ["tp=1,2,4,8", "pp=1,2,4,5,8,10,16,20", "dp=1,2,4,8,16,32,64,128,256,512,1024",
        "micro_batch=1,2,4,8", "interleave=1,2,4,5", "recompute=none,selective,full", "sequence_parallel=0,1",
        "zero_stage=0,1,2,3"]


def row(name: str, value: float, unit: str, target: str, ok: bool | None) -> str:
    verdict = "" if ok is None else ("  ok" if ok else "  MISSED")
    return f"{name:<52}{value:>12.3f} {unit:<10}{target:>10}{verdict}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--run", type=Path, default=REPO / "runs" / "llama70b_1024xh100.yaml")
    parser.add_argument("--catalog", type=Path, default=REPO / "catalog")
    args = parser.parse_args()
    lines = [f"{'benchmark':<52}{'value':>12} {'unit':<10}{'target':>10}"]
    with tempfile.TemporaryDirectory() as build:
        manifest = pipeline.run(args.catalog, Path(build), write_manifest=True).manifest
        if manifest is None:
            raise SystemExit("the catalog has errors: run `gpustack check`")
        wall = median_wall(["--catalog", str(args.catalog), "--build-dir", build, "estimate", str(args.run)], 3)
        lines.append(row("gpustack estimate process, median wall", wall, "s", "<= 2", wall <= 2))

        engine = Engine(ManifestSource(manifest))
        resolver = engine.resolver
        run = load_run(args.run)
        scenario = engine.run_scenario(run)
        dists = fitted_distributions(scenario)  # the run's own uncertain inputs (fitted and sourced spreads)
        mc = MonteCarlo(resolver)
        start = time.perf_counter()
        summary = mc.run("econ.cost.per_token", scenario, dists, 10000, seed=0)
        t = time.perf_counter() - start
        lines.append(row(f"10,000 MC samples of cost per token over {len(dists)} inputs, cold", t, "s", "<= 1", t <= 1))
        start = time.perf_counter()
        mc.run("econ.cost.per_token", scenario, dists, 10000, seed=0)
        t = time.perf_counter() - start
        lines.append(row("  the same, relations already parsed", t, "s", "<= 1", t <= 1))
        lines.append(f"  cost per token p5/p50/p95: {summary.percentiles[5]:.4g} / {summary.percentiles[50]:.4g} / "
                     f"{summary.percentiles[95]:.4g} {summary.units}")

        grid = parse_grid(GRID)
        for objective in ("tokens_per_sec", "cost_per_token"):
            # a fresh engine each time: nothing parsed or compiled before the sweep starts
            result = Engine(ManifestSource(manifest)).sweep(run, grid, objective, 10)
            lines.append(row(f"sweep by {objective}: {result.grid_points:,} grid points, {result.evaluated:,} "
                             f"layouts evaluated ({result.valid:,} valid)", result.seconds, "s", "-", None))
            lines.append(row("  model evaluations per second of evaluating", result.evaluated / result.model_seconds
                             / 1000, "k eval/s", "-", None))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
