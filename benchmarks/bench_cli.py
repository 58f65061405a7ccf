"""Where a person waits: `gpustack show`, `check` and `estimate` as fresh processes with warm caches
(the compile cache, and the engine's parsed relations, in a build directory made by one untimed run).

Targets (wall time of the whole process, on an idle machine where a bare `python -c pass` takes
about 0.04 s; the first row measures that baseline here, to read the others against):
`show NAME` <= 0.4 s, `check` <= 0.3 s, `estimate runs/llama70b_1024xh100.yaml` <= 1.5 s.

    python benchmarks/bench_cli.py [--repeat 7]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time

from cli_process import REPO, median_wall, run_cli

TARGETS = [  # (arguments, target in seconds)
    (["show", "econ.cost.per_token"], 0.4),
    (["check"], 0.3),
    (["estimate", "runs/llama70b_1024xh100.yaml"], 1.5),
]


def bare_python(repeat: int) -> float:
    def once() -> float:
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        return time.perf_counter() - start

    return statistics.median(once() for _ in range(repeat))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=7, help="Fresh processes per command (median).")
    args = parser.parse_args()
    print(f"{'command':<52}{'median s':>10}{'target s':>10}")
    print(f"{'python -c pass (baseline)':<52}{bare_python(args.repeat):>10.3f}")
    with tempfile.TemporaryDirectory() as build:
        base = ["--catalog", str(REPO / "catalog"), "--build-dir", build]
        for cli_args, target in TARGETS:
            run_cli(base + cli_args)  # warms the caches; not timed
            wall = median_wall(base + cli_args, args.repeat)
            verdict = "ok" if wall <= target else "MISSED"
            print(f"{'gpustack ' + ' '.join(cli_args):<52}{wall:>10.3f}{target:>10.1f}  {verdict}")


if __name__ == "__main__":
    main()
