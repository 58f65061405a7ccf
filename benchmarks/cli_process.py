"""Timing `gpustack` as a fresh process, the way a user meets it (shared by the benchmark scripts)."""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def run_cli(args: list[str]) -> tuple[float, subprocess.CompletedProcess]:
    """Wall time and result of `gpustack ARGS`; a failed run stops the benchmark with its error."""
    start = time.perf_counter()
    res = subprocess.run([sys.executable, "-c", "from gpustack_sim.cli.main import main; main()", *args],
                         cwd=REPO, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if res.returncode != 0:
        raise SystemExit(f"gpustack {' '.join(args)} failed (exit {res.returncode}):\n{res.stderr}{res.stdout[-2000:]}")
    return wall, res


def median_wall(args: list[str], repeat: int) -> float:
    """Median wall time of `gpustack ARGS` over `repeat` fresh processes."""
    return statistics.median(run_cli(args)[0] for _ in range(repeat))


def wall_and_peak(args: list[str]) -> tuple[float, float]:
    """Wall time and peak resident memory (MB) of `gpustack ARGS` as a fresh process."""
    import os

    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", "from gpustack_sim.cli.main import main; main()", *args],
                            cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"gpustack {' '.join(args)} failed (exit {proc.returncode}):\n{proc.stderr.read()}")
    return wall, usage.ru_maxrss / 1024


def wall_and_cpu(args: list[str]) -> tuple[float, float]:
    """Wall time and CPU seconds (user + system) of `gpustack ARGS` as a fresh process."""
    import resource

    def children() -> float:
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        return usage.ru_utime + usage.ru_stime

    before = children()
    wall, _ = run_cli(args)
    return wall, children() - before
