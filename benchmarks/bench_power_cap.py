"""Benchmark: resolving a GPU's capped clock, power and throughput in process (issue 42: at most 50 ms).

    python benchmarks/bench_power_cap.py [--caps 20]

The H100 SXM preset and the measured node preset, with the cap model's three uncalibrated roots given
test values (the V-f slope, the memory-bound activity and knee; they are not catalog data); each call
resolves the six figures of gpustack_sim.power.CAP_FIGURES for a new cap, on an engine already open
(the first call, which compiles the relations, is reported apart). Times are on a shared machine.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from gpustack_sim import Engine

REPO = Path(__file__).resolve().parent.parent
TEST_ROOTS = {"gpu.cap.vf_slope": "0.6", "gpu.cap.activity_memory": "0.5", "gpu.cap.memory_knee": "0.5"}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--caps", type=int, default=20)
    args = parser.parse_args()
    engine = Engine.open(REPO / "catalog")
    scenario = engine.scenario(["gpu_h100_sxm", "power_node_h100_measured"], TEST_ROOTS,
                               {"gpu.clock.boost": "datasheet"})
    start = time.perf_counter()
    engine.power_under_cap(scenario, 690.0)
    print(f"first capped resolution (relations parsed and compiled): {(time.perf_counter() - start) * 1e3:.1f} ms")
    walls, cpus = [], []
    for i in range(args.caps):
        watts = 200.0 + 480.0 * i / max(args.caps - 1, 1)
        start, cpu = time.perf_counter(), time.process_time()
        res = engine.power_under_cap(scenario, watts)
        walls.append(time.perf_counter() - start)
        cpus.append(time.process_time() - cpu)
        assert res.resolved
    print(f"{args.caps} caps from 200 to 680 W: median {statistics.median(walls) * 1e3:.1f} ms wall, "
          f"{statistics.median(cpus) * 1e3:.1f} ms CPU, max {max(walls) * 1e3:.1f} ms wall   target <= 50 ms")


if __name__ == "__main__":
    main()
