"""Benchmark of the observatory build (issue: observatory).

Target: `gpustack observatory build` for the full catalog, every run file, their simulations and the
experiments in at most 30 s, as a user runs it: a fresh process (catalog compile cache cold, then warm).
Also checks that two builds give byte-identical sites.

    python benchmarks/bench_observatory.py [--repeats 2]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TARGET_S = 30.0


def build(out: Path, build_dir: Path) -> tuple[float, dict]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-c", "from gpustack_sim.cli.main import main; main()", "--build-dir", str(build_dir),
           "observatory", "build", "--out", str(out), "--json"]
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, check=True)
    return time.perf_counter() - start, json.loads(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2, help="Builds after the cold one.")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(tmp) / "build"
        cold, first = build(Path(tmp) / "site0", cache)
        print(f"cold build (catalog compiled): {cold:6.2f} s  {first['files']} files, sha256 {first['digest'][:16]}")
        digests = {first["digest"]}
        warm = []
        for i in range(args.repeats):
            seconds, report = build(Path(tmp) / f"site{i + 1}", cache)
            warm.append(seconds)
            digests.add(report["digest"])
            print(f"warm build {i + 1}:                 {seconds:6.2f} s  sha256 {report['digest'][:16]}")
        size = sum(p.stat().st_size for p in (Path(tmp) / "site0").rglob("*") if p.is_file())
        shutil.rmtree(cache)
    print(f"site size {size / 1e6:.1f} MB; identical bytes across builds: {'yes' if len(digests) == 1 else 'NO'}")
    worst = max([cold, *warm])
    print(f"slowest {worst:.2f} s against the target of {TARGET_S:.0f} s: {'met' if worst <= TARGET_S else 'MISSED'}")
    sys.exit(0 if worst <= TARGET_S and len(digests) == 1 else 1)


if __name__ == "__main__":
    main()
