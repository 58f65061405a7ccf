"""The serving replay at fleet scale: one hour of a 1,000-GPU fleet (500 replicas of the README serving
run's tensor-parallel-2 layout) at 500 requests/s of the `poisson` family, in this process on one core.

Target: <= 10 s of CPU time and <= 1 GB peak resident memory for the replay (parameters resolved first,
untimed). The CPU column moves less than wall time when other work shares the machine.

    python benchmarks/bench_serving.py [--hours 1] [--rate 500] [--gpus 1000] [--tick 1]
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hours", type=float, default=1.0)
    ap.add_argument("--rate", type=float, default=500.0)
    ap.add_argument("--gpus", type=int, default=1000)
    ap.add_argument("--tick", type=float, default=1.0)
    ap.add_argument("--family", default="poisson")
    a = ap.parse_args()

    import numpy as np

    from gpustack_sim.api import Engine
    from gpustack_sim.datacenter.serving import load_family, replica_parameters
    from gpustack_sim.datacenter.serving.api import draw_requests
    from gpustack_sim.datacenter.serving.fleet import replay

    eng = Engine.open(REPO / "catalog")
    run = eng.load_run(REPO / "runs" / "serve_llama70b_8xh100.yaml")
    params, _ = replica_parameters(eng.context, run)
    lengths = {k: {"mean": getattr(run.workload, k).mean, "max": getattr(run.workload, k).max}
               for k in ("input_tokens", "output_tokens")}
    horizon = a.hours * 3600
    c0, w0 = time.process_time(), time.perf_counter()
    reqs = draw_requests(load_family(a.family), a.rate, horizon, lengths, None, run.model.seq_len,
                         np.random.SeedSequence(0))
    c1 = time.process_time()
    fleet = replay([(params, 0)] * (a.gpus // params.gpus_per_replica), reqs, horizon, tick_s=a.tick)
    c2, w2 = time.process_time(), time.perf_counter()
    rss_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6
    done = int((~np.isnan(fleet.log.finish_s)).sum())
    print(f"{len(reqs)} requests ({done} finished) on {a.gpus // params.gpus_per_replica} replicas, {a.hours:g} h "
          f"at {a.rate:g}/s, tick {a.tick:g} s")
    print(f"  CPU: draw {c1 - c0:.2f} s, replay {c2 - c1:.2f} s ({(c2 - c1) / len(reqs) * 1e6:.1f} us/request); "
          f"wall {w2 - w0:.2f} s; peak RSS {rss_gb:.2f} GB")
    print(f"  target: replay <= 10 s CPU ({'met' if c2 - c0 <= 10 else 'NOT met'}), "
          f"<= 1 GB ({'met' if rss_gb <= 1 else 'NOT met'})")


if __name__ == "__main__":
    main()
