"""The local learning workload (`gpustack learn`) as a fresh process: the smoke config the test suite runs
and the full calibration set, each written to a temporary folder (the committed measurements are untouched).

Targets (wall time of the whole process, JAX import and XLA compilation included, on this 2-core machine when
it is otherwise idle): smoke (runs/learning/smoke.yaml) <= 60 s, the full calibration set
(runs/learning/calibration.yaml) <= 30 min. The CPU column (user + system of the process) and the load
average printed beside each row say how much of the wall time a busy machine took away.

    python benchmarks/bench_learning.py [--smoke-only]
"""

from __future__ import annotations

import argparse
import os
import tempfile

from cli_process import wall_and_cpu

TARGETS = [("smoke", "runs/learning/smoke.yaml", 60.0), ("calibration", "runs/learning/calibration.yaml", 1800.0)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke-only", action="store_true", help="Time the smoke config alone.")
    args = parser.parse_args()
    print(f"{'config':<14}{'wall s':>10}{'cpu s':>10}{'target s':>10}  load (1, 5, 15 min) before -> after")
    for name, config, target in TARGETS[:1] if args.smoke_only else TARGETS:
        before = os.getloadavg()
        with tempfile.TemporaryDirectory() as out:
            wall, cpu = wall_and_cpu(["learn", config, "--out", out])
        after = os.getloadavg()
        verdict = "ok" if wall <= target else "OVER"
        print(f"{name:<14}{wall:>10.1f}{cpu:>10.1f}{target:>10.0f}  {tuple(round(x, 1) for x in before)} -> "
              f"{tuple(round(x, 1) for x in after)}  {verdict}")


if __name__ == "__main__":
    main()
