"""Benchmarks for `gpustack check` + `compile` (issue: catalog compiler).

Targets: the real catalog in at most 1 s of wall time with a warm cache; a synthetic catalog of
10,000 variables and 7,000 relations in at most 10 s (cold), growing about linearly from 1,000.

    python benchmarks/bench_compile.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
from pathlib import Path

from cli_process import median_wall
from synthetic_catalog import generate

REPO = Path(__file__).resolve().parent.parent


def check_and_compile(catalog: Path, build: Path, repeat: int, cold: bool) -> float:
    total = []
    for _ in range(repeat):
        if cold:
            shutil.rmtree(build, ignore_errors=True)
        t = median_wall(["--catalog", str(catalog), "--build-dir", str(build), "check"], 1)
        t += median_wall(["--catalog", str(catalog), "--build-dir", str(build), "compile"], 1)
        total.append(t)
    return statistics.median(total)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        real_build = tmp / "real-build"
        rows.append(("real catalog, check + compile, cold cache", check_and_compile(
            REPO / "catalog", real_build, args.repeat, cold=True), None))
        rows.append(("real catalog, check + compile, warm cache", check_and_compile(
            REPO / "catalog", real_build, args.repeat, cold=False), 1.0))
        sizes = {}
        for n_vars, n_rels in ((1000, 700), (10000, 7000)):
            cat = generate(tmp / f"syn{n_vars}", n_vars, n_rels, seed=0)
            t = check_and_compile(cat, tmp / f"syn{n_vars}-build", args.repeat, cold=True)
            sizes[n_vars] = t
            rows.append((f"synthetic {n_vars} variables / {n_rels} relations, cold", t,
                         10.0 if n_vars == 10000 else None))
            rows.append((f"synthetic {n_vars} variables / {n_rels} relations, warm",
                         check_and_compile(cat, tmp / f"syn{n_vars}-build", args.repeat, cold=False), None))
    print(f"{'benchmark':<58}{'seconds':>9}{'target':>9}")
    for name, t, target in rows:
        print(f"{name:<58}{t:>9.2f}{(f'{target:.1f}' if target else '-'):>9}"
              + ("" if target is None else ("  ok" if t <= target else "  MISSED")))
    ratio = sizes[10000] / sizes[1000]
    print(f"growth 1,000 -> 10,000 variables: x{ratio:.1f} time for x10 size "
          f"({'about linear or better' if ratio <= 12 else 'super-linear'}; fixed start-up cost included)")


if __name__ == "__main__":
    main()
