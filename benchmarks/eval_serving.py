"""Replay single serving fleets against published online serving benchmarks (evaluation data, never fitted
to): data/serving_evaluation/*.yaml. Prints measured and replayed TTFT and TPOT percentiles and output
throughput per case, with the replay's interval over replications.

    python benchmarks/eval_serving.py [--replications 3] [--minutes 10]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--replications", type=int, default=3)
    ap.add_argument("--minutes", type=float, default=10.0)
    a = ap.parse_args()

    from gpustack_sim.api import Engine

    eng = Engine.open(REPO / "catalog")
    for path in sorted((REPO / "data" / "serving_evaluation").glob("*.yaml")):
        for case in yaml.safe_load(path.read_text())["cases"]:
            run = eng.load_run(REPO / case["run"], [f"workload.output_tokens.mean={case['output_tokens_mean']}"])
            res = eng.simulate_serving(run, arrivals="poisson", hours=a.minutes / 60, rate=case["request_rate_per_s"],
                                       replications=a.replications, seed=0)
            f, m = res.figures, case["measured"]
            print(f"{case['id']} ({path.name}): {case['request_rate_per_s']} requests/s, {res.gpus} GPUs, "
                  f"{a.minutes:g} min x {a.replications}")
            rows = [("TTFT p50 (s)", "ttft_p50_s", 1.0), ("TTFT p99 (s)", "ttft_p99_s", 1.0),
                    ("TPOT p50 (ms)", "tpot_p50_s", 1e-3), ("TPOT p99 (ms)", "tpot_p99_s", 1e-3)]
            for label, key, scale in rows:
                s = f[key]
                print(f"  {label:<22} measured {m[key] / scale:10.4g}   replay {s.mean / scale:10.4g} "
                      f"[p5 {s.p5 / scale:.4g}, p95 {s.p95 / scale:.4g}]   ratio {s.mean / m[key]:.3g}")
            tokens = f["tokens_served"].mean / (a.minutes * 60)
            print(f"  {'output tokens/s':<22} measured {m['output_tokens_per_s']:10.6g}   replay {tokens:10.6g} "
                  f"(finished requests over the window)   ratio {tokens / m['output_tokens_per_s']:.3g}")
            print(f"  SLO attainment (replay): {f['slo_attainment'].mean:.4g}; assumptions: "
                  + "; ".join(case["assumptions"]))


if __name__ == "__main__":
    main()
