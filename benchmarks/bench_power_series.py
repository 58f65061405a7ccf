"""Benchmark: what the datacenter's power series adds to a replay (issue 42: at most +10%).

    python benchmarks/bench_power_series.py [--repeat 5]

The README run (runs/llama70b_1024xh100.yaml, 1,024 H100s to 2T tokens) replayed once with its event log
and power pieces, then its site power series: at the default resolution (about 1,000 bins), at 60 s,
and at 0.1 s over E002's analysis window (the danger band reaches 2 Hz). Times are the best of
`--repeat` on a shared machine (CPU time beside wall time).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from gpustack_sim import Engine
from gpustack_sim.datacenter import simulate
from gpustack_sim.datacenter.policies import FixedInterval

REPO = Path(__file__).resolve().parent.parent


def best(fn, repeat: int) -> tuple[float, float]:
    walls, cpus = [], []
    for _ in range(repeat):
        start, cpu = time.perf_counter(), time.process_time()
        fn()
        walls.append(time.perf_counter() - start)
        cpus.append(time.process_time() - cpu)
    return min(walls), min(cpus)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--window-hours", type=float, default=24.0)
    args = parser.parse_args()
    engine = Engine.open(REPO / "catalog")
    params = engine.job_parameters(engine.load_run(REPO / "runs" / "llama70b_1024xh100.yaml"))[0]
    policy = FixedInterval(params.checkpoint_interval_s)
    simulate(params, policy=policy, seed=0)  # warm-up
    bare_wall, bare_cpu = best(lambda: simulate(params, policy=policy, seed=0, log_replications=0), args.repeat)
    replay_wall, replay_cpu = best(lambda: simulate(params, policy=policy, seed=0), args.repeat)
    result = simulate(params, policy=policy, seed=0)
    print(f"replay of {result.figures['wallclock_s'].mean / 86400:.1f} days "
          f"({result.figures['interruptions'].mean:.0f} failures, {result.figures['checkpoints_completed'].mean:.0f} "
          f"checkpoints): {bare_wall * 1e3:.1f} ms wall, {bare_cpu * 1e3:.1f} ms CPU unlogged; logged (event log "
          f"and power pieces) {replay_wall * 1e3:.1f} ms wall, {replay_cpu * 1e3:.1f} ms CPU")
    site = result.sites[0]
    cases = (("default resolution", result.default_resolution_s(), None),
             ("60 s", 60.0, None),
             (f"0.1 s over {args.window_hours:g} h", 0.1, (0.0, args.window_hours * 3600)))
    for label, res, window in cases:
        wall, cpu = best(lambda: result.power_series(site, res, window), args.repeat)
        bins = len(result.power_series(site, res, window).start_s)
        print(f"power series, {label} ({bins} bins): {wall * 1e3:.1f} ms wall, {cpu * 1e3:.1f} ms CPU = "
              f"{cpu / replay_cpu:+.1%} of the logged replay's CPU")


if __name__ == "__main__":
    main()
