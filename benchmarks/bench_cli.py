"""Where a person waits: `gpustack show`, `check` and `estimate` as fresh processes with warm caches
(the compile cache, and the engine's parsed relations, in a build directory made by one untimed run).

Targets (wall time of the whole process, on an idle machine where a bare `python -c pass` takes
about 0.04 s; the first row measures that baseline here, to read the others against):
`show NAME` <= 0.4 s, `check` <= 0.3 s, `estimate runs/llama70b_1024xh100.yaml` <= 1.5 s, and the
serving estimate `estimate runs/serve_llama70b_8xh100.yaml` <= 1.5 s.
The CPU column (user + system of the process) moves less than wall time when other work shares the
machine: on a busy one, read the verdicts against it and the baseline.

    python benchmarks/bench_cli.py [--repeat 7]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import tempfile
import time

from cli_process import REPO, run_cli

TARGETS = [  # (arguments, target in seconds)
    (["show", "econ.cost.per_token"], 0.4),
    (["check"], 0.3),
    (["estimate", "runs/llama70b_1024xh100.yaml"], 1.5),
    (["estimate", "runs/serve_llama70b_8xh100.yaml"], 1.5),
]


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def medians(run, repeat: int) -> tuple[float, float]:
    """Median wall and median CPU seconds of `run()`, which starts one process and returns its wall time."""
    walls, cpus = [], []
    for _ in range(repeat):
        before = children_cpu()
        walls.append(run())
        cpus.append(children_cpu() - before)
    return statistics.median(walls), statistics.median(cpus)


def bare_python() -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=7, help="Fresh processes per command (median).")
    args = parser.parse_args()
    print(f"{'command (median of ' + str(args.repeat) + ' fresh processes)':<52}{'wall s':>8}{'cpu s':>8}{'target':>8}")
    wall, cpu = medians(bare_python, args.repeat)
    print(f"{'python -c pass (baseline)':<52}{wall:>8.3f}{cpu:>8.3f}")
    with tempfile.TemporaryDirectory() as build:
        base = ["--catalog", str(REPO / "catalog"), "--build-dir", build]
        for cli_args, target in TARGETS:
            run_cli(base + cli_args)  # warms the caches; not timed
            wall, cpu = medians(lambda: run_cli(base + cli_args)[0], args.repeat)
            verdict = "ok" if wall <= target else "MISSED"
            print(f"{'gpustack ' + ' '.join(cli_args):<52}{wall:>8.3f}{cpu:>8.3f}{target:>8.1f}  {verdict}")


if __name__ == "__main__":
    main()
