"""Benchmarks for Neo4j (issue 3): compile + load, an estimate from the graph alone (beside the same
estimate from the manifest), cone and root-debt queries, and a synthetic catalog of 10,000 variables.

Targets: `gpustack compile --neo4j` of the full catalog in at most 2 s of wall time (warm compile cache;
issue 17, measured 2.15 s before); upstream cone of `econ.cost.per_token` p50 at most 20 ms; root debt
over all roots at most 500 ms; the synthetic catalog (10,000 variables, 7,000 relations) loaded in at most
5 s (issue 17, measured 6.7 s before) with a cone p50 of at most 100 ms. The load average is printed:
other processes on the machine slow every figure.

Uses $NEO4J_URI if set (the database must hold only gpustack data: the graph is replaced), else
starts a private local Neo4j on free ports with its data in a temporary directory and stops it.

    python benchmarks/bench_neo4j.py [--catalog catalog] [--repeat 3] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

from cli_process import run_cli
from synthetic_catalog import generate

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from gpustack_compiler.build import pipeline  # noqa: E402
from gpustack_compiler.manifest.source import ManifestSource  # noqa: E402
from gpustack_compiler.neo4j.source import Neo4jSource  # noqa: E402


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PrivateServer:
    """A local Neo4j with its own state, data and ports; the launcher build is shared with the user cache."""

    def __init__(self, root: Path):
        from gpustack_compiler.neo4j.server import operations as srv

        self.srv = srv
        build = srv.ensure_built()
        self.cache = root / "cache"
        self.cache.mkdir(parents=True)
        (self.cache / "neo4j-launcher").symlink_to(build.parent, target_is_directory=True)
        self.saved = os.environ.get("GPUSTACK_CACHE_DIR")
        os.environ["GPUSTACK_CACHE_DIR"] = str(self.cache)
        self.data = root / "data"
        self.status = srv.start(bolt_port=free_port(), http_port=None, data_dir=self.data)
        self.uri = self.status["bolt_uri"]

    def stop(self) -> None:
        self.srv.stop(data_dir=self.data)
        if self.saved is None:
            os.environ.pop("GPUSTACK_CACHE_DIR", None)
        else:
            os.environ["GPUSTACK_CACHE_DIR"] = self.saved


def gpustack(*args: str) -> tuple[float, dict]:
    """Wall time and JSON output of `gpustack ARGS --json` as a fresh process."""
    wall, res = run_cli([*args, "--json"])
    return wall, json.loads(res.stdout)


def timings(fn, runs: int, warmup: int = 5) -> list[float]:
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def run(catalog: Path, repeat: int, tmp: Path) -> list[tuple[str, float, float | None, str]]:
    rows: list[tuple[str, float, float | None, str]] = []
    real_build = tmp / "real-build"
    cold, data = gpustack("--catalog", str(catalog), "--build-dir", str(real_build), "compile", "--neo4j")
    rows.append(("full catalog: compile --neo4j, cold cache, first load", cold, None,
                 f"{data['variables']} variables, {data['neo4j']['nodes']} nodes, "
                 f"{data['neo4j']['relationships']} relationships"))
    for _ in range(2):  # untimed: a fresh server plans and JIT-compiles the load statements first
        gpustack("--catalog", str(catalog), "--build-dir", str(real_build), "compile", "--neo4j")
    walls, loads = [], []
    for _ in range(repeat):
        wall, data = gpustack("--catalog", str(catalog), "--build-dir", str(real_build), "compile", "--neo4j")
        walls.append(wall)
        loads.append(data["neo4j"]["seconds"])
    rows.append(("full catalog: compile --neo4j (warm compile cache), wall", statistics.median(walls), 2.0,
                 f"median of {repeat} after 2 warm-ups; the load itself {statistics.median(loads):.2f} s"))

    run_file = str(REPO / "runs" / "llama70b_1024xh100.yaml")
    from_graph = statistics.median(gpustack("estimate", run_file, "--neo4j")[0] for _ in range(repeat))
    from_manifest = statistics.median(
        gpustack("--catalog", str(catalog), "--build-dir", str(real_build), "estimate", run_file)[0]
        for _ in range(repeat))
    rows.append(("full catalog: estimate of the README run --neo4j, wall", from_graph, None,
                 f"median of {repeat}; from the manifest (warm compile cache) {from_manifest:.2f} s"))

    manifest = pipeline.run(catalog, real_build, write_manifest=False).manifest
    with Neo4jSource.from_env() as neo:
        cone = timings(lambda: neo.cone("econ.cost.per_token"), 200)
        size = len(neo.cone("econ.cost.per_token"))
        rows.append(("upstream cone of econ.cost.per_token, p50", statistics.median(cone), 0.020,
                     f"{size} names; p95 {pct(cone, 95) * 1000:.1f} ms over 200 runs"))
        debt = timings(neo.root_debt, 20, warmup=2)
        n_roots = len(neo.root_debt())
        rows.append(("root debt over all roots, median", statistics.median(debt), 0.500,
                     f"{n_roots} roots; families {statistics.median(timings(neo.family_debt, 10, 2)) * 1000:.1f} ms"))
        every = list(manifest["variables"])
        t = time.perf_counter()
        for name in every:
            neo.cone(name)
        rows.append(("upstream cone of every variable, mean", (time.perf_counter() - t) / len(every), None,
                     f"{len(every)} variables"))

    syn = generate(tmp / "syn10k", 10000, 7000, seed=0)
    syn_build = tmp / "syn10k-build"
    t = time.perf_counter()
    pipeline.run(syn, syn_build, write_manifest=True)
    rows.append(("synthetic 10k: compile (no Neo4j), cold", time.perf_counter() - t, None, "fills the compile cache"))
    wall, data = gpustack("--catalog", str(syn), "--build-dir", str(syn_build), "compile", "--neo4j")
    rows.append(("synthetic 10k: load (replacing the full catalog)", data["neo4j"]["seconds"], 5.0,
                 f"{data['neo4j']['nodes']} nodes, {data['neo4j']['relationships']} relationships; "
                 f"wall {wall:.2f} s"))
    wall, data = gpustack("--catalog", str(syn), "--build-dir", str(syn_build), "compile", "--neo4j")
    rows.append(("synthetic 10k: load again (replacing itself)", data["neo4j"]["seconds"], 5.0,
                 f"wall {wall:.2f} s, removed {data['neo4j']['removed_nodes']} stale nodes"))
    manifest = pipeline.run(syn, syn_build, write_manifest=False).manifest
    mem = ManifestSource(manifest)
    names = sorted(manifest["variables"])
    sample = random.Random(0).sample(names, 200)
    largest = sorted(names, key=lambda n: -len(mem.cone(n)))[:50]
    with Neo4jSource.from_env() as neo:
        for name in sample[:20]:
            neo.cone(name)
        random_t = []
        for name in sample:
            t = time.perf_counter()
            neo.cone(name)
            random_t.append(time.perf_counter() - t)
        rows.append(("synthetic 10k: upstream cone, p50 over 200 random variables", statistics.median(random_t),
                     0.100, f"p95 {pct(random_t, 95) * 1000:.1f} ms; cones of "
                     f"{statistics.median(len(mem.cone(n)) for n in sample):.0f} names (median)"))
        big_t = []
        for name in largest:
            t = time.perf_counter()
            neo.cone(name)
            big_t.append(time.perf_counter() - t)
        rows.append(("synthetic 10k: upstream cone, p50 over the 50 largest cones", statistics.median(big_t), 0.100,
                     f"cones of {len(mem.cone(largest[-1]))}-{len(mem.cone(largest[0]))} names"))
        t = time.perf_counter()
        neo.root_debt()
        rows.append(("synthetic 10k: root debt over all roots", time.perf_counter() - t, None,
                     f"{len(manifest['variables']) - len(manifest['relations'])} roots (no target)"))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--catalog", type=Path, default=REPO / "catalog")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="Print the rows as JSON.")
    args = parser.parse_args()
    server = None
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        if not os.environ.get("NEO4J_URI"):
            t = time.perf_counter()
            server = PrivateServer(tmp / "neo4j")
            os.environ["NEO4J_URI"] = server.uri
            started = time.perf_counter() - t
        try:
            rows = run(args.catalog.resolve(), args.repeat, tmp)
        finally:
            if server is not None:
                server.stop()
                os.environ.pop("NEO4J_URI", None)
    if server is not None:
        rows.insert(0, ("local Neo4j start (private, temporary data)", started, None,
                        f"{server.status['rss_mb']} MB resident after start"))
    if args.json:
        print(json.dumps([{"benchmark": n, "seconds": s, "target": t, "note": note} for n, s, t, note in rows],
                         indent=2))
        return
    print("load average " + ", ".join(f"{x:.2f}" for x in os.getloadavg()) + f" on {os.cpu_count()} cores")
    print(f"{'benchmark':<62}{'result':>10}{'target':>10}")
    for name, seconds, target, note in rows:
        fmt = (lambda x: f"{x * 1000:.1f} ms") if (target or seconds) < 1 else (lambda x: f"{x:.2f} s")
        verdict = "" if target is None else ("  ok" if seconds <= target else "  MISSED")
        print(f"{name:<62}{fmt(seconds):>10}{(fmt(target) if target else '-'):>10}{verdict}  {note}")


if __name__ == "__main__":
    main()
