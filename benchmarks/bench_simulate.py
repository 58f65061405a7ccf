"""Benchmarks for the virtual datacenter (issue: datacenter).

Targets: one 54-day replay of a 16,384-GPU (2,048-node) job in at most 1 s on one core; 1,000
replications in at most 60 s with 2 local Dask workers; peak memory at most 500 MB. Also the event
kernel, SimPy against the heap loop, on the same event pattern (decided which one the replay uses).

    python benchmarks/bench_simulate.py [--replications 1000] [--workers 2]

The job is the README run (runs/llama70b_1024xh100.yaml) widened to 16,384 GPUs (data parallelism 512,
global batch 2,048), resolved from the catalog; failures at the catalog's fleet per-node rate.
"""

from __future__ import annotations

import argparse
import heapq
import resource
import time
from pathlib import Path

import numpy as np

from gpustack_sim import Engine
from gpustack_sim.datacenter import simulate
from gpustack_sim.datacenter.events import EventKind, EventQueue, Priority
from gpustack_sim.distributed import Backend
from gpustack_sim.distributed.cluster import connect

REPO = Path(__file__).resolve().parent.parent
WIDEN = ["gpus=16384", "layout.dp=512", "layout.global_batch=2048"]
DAYS = 54


def big_job():
    engine = Engine.open(REPO / "catalog")
    return engine.job_parameters(engine.load_run(REPO / "runs" / "llama70b_1024xh100.yaml", WIDEN))[0]


def kernel_heap(times: np.ndarray) -> float:
    """Push every event, pop them in order: the replay's own queue."""
    start = time.perf_counter()
    queue = EventQueue()
    for t in times:
        queue.push(int(t), Priority.WORLD, EventKind.FAILURE)
    while len(queue):
        queue.pop()
    return time.perf_counter() - start


def kernel_simpy(times: np.ndarray) -> float:
    """The same events as SimPy timeouts with a callback each, run to the end."""
    import simpy

    start = time.perf_counter()
    env = simpy.Environment()
    seen = []
    for t in times:
        env.timeout(float(t)).callbacks.append(seen.append)
    env.run()
    return time.perf_counter() - start


def kernel_plain_heap(times: np.ndarray) -> float:
    start = time.perf_counter()
    heap: list = []
    for seq, t in enumerate(times):
        heapq.heappush(heap, (int(t), 0, 0, seq))
    while heap:
        heapq.heappop(heap)
    return time.perf_counter() - start


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--replications", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    params = big_job()
    print(f"job: {params.gpus} GPUs, {params.nodes} nodes, step {params.step_time_s:.3f} s, "
          f"MTBF {params.job_mtbf_s / 3600:.2f} h, checkpoint every {params.checkpoint_interval_s:.0f} s")

    simulate(params, days=DAYS, to_budget=False)  # warm-up (imports, first allocation)
    start, cpu = time.perf_counter(), time.process_time()
    one = simulate(params, days=DAYS, to_budget=False, seed=1)
    single, cpu = time.perf_counter() - start, time.process_time() - cpu
    # CPU time besides wall time: on a shared machine the wall time measures the neighbours too.
    print(f"one {DAYS}-day replay: {single * 1e3:.1f} ms wall, {cpu * 1e3:.1f} ms CPU "
          f"({one.figures['interruptions'].mean:.0f} failures, {len(one.log)} log rows)   target <= 1000 ms")
    start = time.perf_counter()
    series = one.power_series("site", 60.0)
    print(f"its power series at 60 s ({len(series.start_s)} bins): {(time.perf_counter() - start) * 1e3:.0f} ms")

    with connect(args.workers) as client:
        start = time.perf_counter()
        many = simulate(params, days=DAYS, to_budget=False, seed=2, replications=args.replications,
                        backend=Backend(client), log_replications=0)
        wall = time.perf_counter() - start
        workers_peak = client.run(_peak_rss_mb)
    print(f"{args.replications} replications, {args.workers} workers: {wall:.2f} s wall   target <= 60 s "
          f"(goodput p50 {many.figures['useful_time_share'].p50:.4f})")
    peak_self = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak memory: {peak_self:.0f} MB (this process), {max(workers_peak.values()):.0f} MB (largest worker)"
          "   target <= 500 MB")

    rng = np.random.default_rng(0)
    times = np.sort(rng.integers(0, DAYS * 86400 * 10**9, size=200_000))
    rng.shuffle(times)
    for name, fn in (("heap loop (EventQueue)", kernel_heap), ("heapq tuples", kernel_plain_heap),
                     ("SimPy 4 Environment", kernel_simpy)):
        secs = min(fn(times) for _ in range(3))
        print(f"event kernel, {len(times)} events: {name:<24} {secs / len(times) * 1e6:.2f} us/event")


if __name__ == "__main__":
    main()
