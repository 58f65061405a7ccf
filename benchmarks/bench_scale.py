"""Benchmarks for scaling out (issue 17): sweeps and simulation replications on local Dask workers,
single-core sweep throughput, and the memory of a streaming sweep of 10^8 layouts.

Targets: 2 local workers over 1 at least 1.7x faster for a sweep and for simulation replications (on a
2-core machine); single-core sweep throughput toward 10^6 layouts/s; memory of a 10^8-layout sweep bounded
(the same as for 10^6). Other processes on the machine slow every figure: the load average is printed
beside them.

    python benchmarks/bench_scale.py [--layouts 96000000] [--replications 48] [--skip-memory]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from gpustack_sim import Engine  # noqa: E402
from gpustack_sim.datacenter import simulate  # noqa: E402
from gpustack_sim.distributed import Backend  # noqa: E402
from gpustack_sim.distributed.cluster import connect  # noqa: E402

RUN = REPO / "runs" / "llama70b_1024xh100.yaml"
# Nine axes; dp takes 1..N so that the grid holds about the number of layouts asked for.
AXES = {"tp": range(1, 9), "pp": range(1, 11), "cp": range(1, 6), "micro_batch": range(1, 11),
        "interleave": range(1, 6), "zero_stage": range(0, 4), "recompute": ["none", "selective", "full"],
        "sequence_parallel": [0, 1]}
PER_DP = 8 * 10 * 5 * 10 * 5 * 4 * 3 * 2  # layouts per value of dp


def grid(layouts: int) -> dict:
    return {**{k: list(v) for k, v in AXES.items()}, "dp": list(range(1, max(1, layouts // PER_DP) + 1))}


def load() -> str:
    return "load average " + ", ".join(f"{x:.2f}" for x in os.getloadavg()) + f" on {os.cpu_count()} cores"


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def timed_sweep(engine: Engine, run, layouts: int, client=None) -> tuple[float, object]:
    start = time.perf_counter()
    result = engine.sweep(run, grid(layouts), "tokens_per_sec", 10, client=client)
    return time.perf_counter() - start, result


def speedups(engine: Engine, run, layouts: int, replications: int) -> None:
    params = engine.job_parameters(engine.load_run(RUN, ["gpus=16384", "layout.dp=512",
                                                          "layout.global_batch=2048"]))[0]
    walls: dict[str, dict[int, float]] = {"sweep": {}, "simulate": {}}
    answers: dict[str, set] = {"sweep": set(), "simulate": set()}
    for n in (1, 2):
        with connect(n) as client:
            # workers import and compile: a sweep of one chunk runs in this process, so the warm-up spans several
            engine.sweep(run, grid(30 * PER_DP), "tokens_per_sec", 10, client=client)
            wall, result = timed_sweep(engine, run, layouts, client)
            walls["sweep"][n] = wall
            answers["sweep"].add(json.dumps({**result.to_dict(), "seconds": 0}, sort_keys=True))
            start = time.perf_counter()
            sim = simulate(params, days=54, to_budget=False, seed=2, replications=replications,
                           backend=Backend(client), log_replications=0)
            walls["simulate"][n] = time.perf_counter() - start
            answers["simulate"].add(json.dumps(sim.to_dict(), sort_keys=True, default=str))
            worker_peak = max(client.run(peak_rss_mb).values())
        print(f"  {n} worker(s): sweep of {result.grid_points:,} grid points ({result.evaluated:,} layouts evaluated) "
              f"{walls['sweep'][n]:.2f} s ({result.evaluated / walls['sweep'][n]:,.0f} evaluations/s); "
              f"{replications} 54-day replications of a "
              f"16,384-GPU job {walls['simulate'][n]:.2f} s; largest worker peak RSS {worker_peak:.0f} MB; {load()}")
    for what in walls:
        ratio = walls[what][1] / walls[what][2]
        same = "identical results" if len(answers[what]) == 1 else "RESULTS DIFFER"
        print(f"  speed-up of 2 workers over 1, {what}: x{ratio:.2f}   target >= 1.7  "
              f"{'ok' if ratio >= 1.7 else 'MISSED'}  ({same})")


def single_core(engine: Engine, run, layouts: int) -> None:
    small = PER_DP * 2
    cold = Engine(engine.source)  # nothing resolved or compiled yet
    wall, result = timed_sweep(cold, run, small)
    print(f"  end to end, cold engine, {result.grid_points:,} grid points, {result.evaluated:,} layouts evaluated: "
          f"{wall:.2f} s (resolving and compiling the model is most of it)")
    timed_sweep(engine, run, small)
    wall, result = timed_sweep(engine, run, layouts)
    print(f"  steady state, {result.grid_points:,} grid points, {result.evaluated:,} layouts evaluated "
          f"({result.valid:,} valid): {wall:.2f} s = {result.evaluated / wall:,.0f} evaluations/s, "
          f"{result.grid_points / wall:,.0f} grid points/s; {load()}")


def memory(layouts: list[int]) -> None:
    """Peak RSS of a fresh process sweeping each grid in this process (no cluster)."""
    code = ("import json, resource, sys, time; from pathlib import Path; sys.path.insert(0, 'benchmarks');"
            "from bench_scale import grid, RUN; from gpustack_sim import Engine;"
            "e = Engine.open(Path('catalog'), None); run = e.load_run(RUN);"
            "t = time.perf_counter(); r = e.sweep(run, grid(int(sys.argv[1])), 'tokens_per_sec', 10);"
            "print(json.dumps([r.grid_points, time.perf_counter() - t,"
            " resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024]))")
    for n in layouts:
        res = subprocess.run([sys.executable, "-c", code, str(n)], cwd=REPO, capture_output=True, text=True,
                             env={**os.environ, "PYTHONPATH": str(REPO)}, check=True)
        points, wall, peak = json.loads(res.stdout)
        print(f"  {points:>12,} grid points: peak RSS {peak:6.0f} MB, {wall:6.1f} s; {load()}")


def main() -> None:
    parser = argparse.ArgumentParser()
    # The sweep of 10^8 layouts: at 6 x 10^6 layouts/s a sweep of 2.4 x 10^7 lasts under 4 s, where
    # the client's planning and Dask's per-task cost (about 0.6 s) bound what a second worker can save.
    parser.add_argument("--layouts", type=int, default=96_000_000, help="Layouts in the speed-up sweep.")
    parser.add_argument("--replications", type=int, default=48)
    parser.add_argument("--skip-memory", action="store_true", help="Skip the 10^8-layout memory run.")
    args = parser.parse_args()
    engine = Engine.open(REPO / "catalog", None)
    run = engine.load_run(RUN)
    print(f"single core (no cluster); {load()}")
    single_core(engine, run, args.layouts)
    print("local Dask workers")
    speedups(engine, run, args.layouts, args.replications)
    if not args.skip_memory:
        print("memory of a streaming sweep, one process")
        memory([1_000_000, 10_000_000, 100_000_000])


if __name__ == "__main__":
    main()
