"""Benchmarks for `gpustack check` + `compile` (issues: catalog compiler, 17 big catalogs).

Targets: the real catalog in at most 1 s of wall time with a warm cache; a synthetic catalog of
10,000 variables and 7,000 relations in at most 10 s (cold); 100,000 variables in at most 120 s with at
most 4 GB peak memory, growing about linearly. Wall time and peak resident memory of each command
process, with the load average beside them (other processes on the machine slow every figure).

    python benchmarks/bench_compile.py [--repeat 3] [--sizes 1000,10000,100000]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
from pathlib import Path

from cli_process import wall_and_peak
from synthetic_catalog import generate

REPO = Path(__file__).resolve().parent.parent


def check_and_compile(catalog: Path, build: Path, repeat: int, cold: bool) -> tuple[float, float]:
    """Median wall time of `check` then `compile`, and the larger peak memory of the two processes."""
    total, peak = [], 0.0
    for _ in range(repeat):
        if cold:
            shutil.rmtree(build, ignore_errors=True)
        t = 0.0
        for command in ("check", "compile"):
            wall, rss = wall_and_peak(["--catalog", str(catalog), "--build-dir", str(build), command])
            t, peak = t + wall, max(peak, rss)
        total.append(t)
    return statistics.median(total), peak


def load() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--sizes", default="1000,10000", help="Synthetic catalog sizes (variables), ascending; "
                        "0.7 relations per variable. 100000 takes minutes.")
    args = parser.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")]
    targets = {10000: (10.0, None), 100000: (120.0, 4096.0)}
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        real_build = tmp / "real-build"
        rows.append(("real catalog, check + compile, cold cache",
                     *check_and_compile(REPO / "catalog", real_build, args.repeat, cold=True), None, None, load()))
        rows.append(("real catalog, check + compile, warm cache",
                     *check_and_compile(REPO / "catalog", real_build, args.repeat, cold=False), 1.0, None, load()))
        walls = {}
        for n_vars in sizes:
            n_rels = n_vars * 7 // 10
            cat = generate(tmp / f"syn{n_vars}", n_vars, n_rels, seed=0)
            repeat = args.repeat if n_vars <= 10000 else 1
            wall, peak = check_and_compile(cat, tmp / f"syn{n_vars}-build", repeat, cold=True)
            walls[n_vars] = wall
            rows.append((f"synthetic {n_vars} variables / {n_rels} relations, cold", wall, peak,
                         *targets.get(n_vars, (None, None)), load()))
            rows.append((f"synthetic {n_vars} variables / {n_rels} relations, warm",
                         *check_and_compile(cat, tmp / f"syn{n_vars}-build", repeat, cold=False), None, None, load()))
            shutil.rmtree(cat)
            shutil.rmtree(tmp / f"syn{n_vars}-build")
    print(f"{'benchmark':<58}{'seconds':>9}{'target':>9}{'peak MB':>9}{'target':>8}  load average")
    for name, t, peak, target, peak_target, avg in rows:
        ok = (target is None or t <= target) and (peak_target is None or peak <= peak_target)
        print(f"{name:<58}{t:>9.2f}{(f'{target:.1f}' if target else '-'):>9}{peak:>9.0f}"
              f"{(f'{peak_target:.0f}' if peak_target else '-'):>8}  {avg}"
              + ("" if target is None and peak_target is None else ("  ok" if ok else "  MISSED")))
    for a, b in zip(sizes, sizes[1:]):
        ratio = walls[b] / walls[a]
        print(f"growth {a:,} -> {b:,} variables: x{ratio:.1f} time for x{b / a:.0f} size "
              f"({'about linear or better' if ratio <= 1.2 * b / a else 'super-linear'}; fixed start-up cost "
              "included)")


if __name__ == "__main__":
    main()
