"""The long run of the fuzzing campaign (the suite runs 200 catalog cases and a few dozen of each command
kind: tests/test_fuzz.py). Cases are mutated catalogs, `--assign` values, run files, sweep grids,
validation CSVs, sites files, serving runs, observations and protocols, made by the mutators of
tests/fuzzing.py from one seed each, so any case is reproduced with `--only KIND:SEED`.

    python benchmarks/fuzz.py --cases 10000 [--seed 0] [--json]     # kinds in the shares of KINDS
    python benchmarks/fuzz.py --per-kind 10000 [--kind sites ...]    # that many of each kind

Cases run in a worker process through `gpustack`'s own main() (a process per case would spend a second on
imports); a worker that crashes or hangs is recorded and replaced. Reported: tracebacks, crashes and
time-outs, the exit-code histogram, findings without file:line, the slowest case, and the peak resident
memory of any case (the worker's high-water mark, reset before each case through /proc/self/clear_refs).
The issue's targets: no traceback, exit codes 0-3 only, every finding with file:line, no case over 10 s,
peak memory under 1 GB.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import random
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]

RUN = REPO / "runs" / "llama70b_1024xh100.yaml"
# share of the cases, in percent
KINDS = {"catalog": 30, "assign": 10, "run": 10, "grid": 10, "csv": 10, "sites": 8, "serving": 8, "observation": 7,
         "protocol": 7}
CASE_TIMEOUT = 120.0  # a case still running after this is a hang: its worker is killed
TARGET_SECONDS, TARGET_BYTES = 10.0, 1 << 30
ASSIGNED = [("gpu.power.total", "700 W"), ("link.inter.cable_length", "100 m"), ("training.total_tokens", "2e12 token"),
            ("cluster.storage.fill_fraction", "0.8"), ("par.micro_batch", "4")]


def case_args(kind: str, seed: int, work: Path, base: Path, build: Path) -> tuple[list[str], str | None, str]:
    """The `gpustack` arguments of one case, the catalog folder whose findings must carry file:line, and a
    description to reproduce it."""
    import fuzzing as fz

    rnd = random.Random(f"{kind}:{seed}")
    if kind == "catalog":
        root = fz.copy_catalog(base, work / "catalog")
        mutators = [rnd.choice(fz.CATALOG_MUTATORS) for _ in range(rnd.choice([1, 1, 2]))]
        touched = [fz.mutate_catalog(root, m, rnd.randrange(2**32)) for m in mutators
                   if any(p.is_file() for p in root.rglob("*.yaml"))]
        return (["--catalog", str(root), "--build-dir", str(work / "build"), "check", "--json"], "catalog",
                f"{'+'.join(mutators)} on {', '.join(touched)}")
    if kind == "assign":
        name, value = rnd.choice(ASSIGNED)
        hostile = fz.mutate_value(value, rnd)
        return ["--build-dir", str(build), "resolve", name, "--assign", f"{name}={hostile}"], None, repr(hostile)
    if kind == "run":
        path = work / "run.yaml"
        data = RUN.read_bytes()
        mutator = rnd.choice([None, fz.byte_flips, fz.truncate, fz.hostile_scalar, fz.non_utf8, fz.duplicate_entry,
                              fz.delete_entry, fz.bom, fz.crlf, fz.deep_nesting, fz.anchors])
        path.write_bytes(mutator(data, rnd) if mutator else data)
        field, value = rnd.choice(fz.RUN_FIELDS), rnd.choice(fz.RUN_FIELD_VALUES)
        return (["--build-dir", str(build), "estimate", str(path), "--samples", "10", "--set", f"{field}={value}"],
                None, f"{mutator.__name__ if mutator else 'none'}, --set {field}={value}")
    if kind == "grid":
        axes = rnd.sample(fz.GRID_AXES, rnd.randint(1, 3))
        grid = [f"{a}={','.join(rnd.choice(fz.GRID_VALUES) for _ in range(rnd.randint(1, 3)))}" for a in axes]
        return ["--build-dir", str(build), "sweep", str(RUN), *[x for g in grid for x in ("--grid", g)]], None, str(grid)
    if kind in fz.DOCUMENTS:
        args = fz.document_case(kind, rnd, REPO, work, build)
        return args, None, f"{kind}: {' '.join(args[2:])}"
    if kind == "csv":
        path = work / "rows.csv"
        rows = (b"model,hardware,precision,hidden,ffn_hidden,heads,layers,seq_len,vocab,gpus,tp,pp,dp,global_batch,"
                b"micro_batch,pipeline_interleaving,recompute,sequence_parallel,seconds_per_iteration\n"
                b"megatron-22B,nvidia_a100_sxm4_80gb,fp16,6144,24576,64,48,2048,51200,8,8,1,1,4,4,1,full,false,1.42\n")
        path.write_bytes(fz.mutate_csv(rows, rnd))
        return ["--build-dir", str(build), "validate", str(path), "--samples", "10"], None, "csv"
    raise ValueError(kind)


def _peak_rss() -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def _reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")  # resets VmHWM to the current resident size (Linux 4.0+)
        return True
    except OSError:
        return False


def worker(conn, base: str, build: str) -> None:
    from fuzzing import Outcome
    from helpers import run_cli_here

    while True:
        msg = conn.recv()
        if msg is None:
            return
        kind, seed = msg
        with tempfile.TemporaryDirectory() as tmp:
            args, catalog_name, what = case_args(kind, seed, Path(tmp), Path(base), Path(build))
            reset = _reset_peak()
            start = time.perf_counter()
            try:
                res = run_cli_here(*args)
                outcome = Outcome(res.returncode, res.stdout, res.stderr)
            except BaseException as exc:  # noqa: BLE001 - an exception escaping main() is the traceback we count
                outcome = Outcome(-1, "", f"Traceback (escaped main): {type(exc).__name__}: {exc}")
            seconds = time.perf_counter() - start
            conn.send({"kind": kind, "seed": seed, "what": what, "code": outcome.code,
                       "problems": outcome.problems(catalog_name), "seconds": seconds,
                       "findings": outcome.stdout.count('"file"') if catalog_name else 0,
                       "peak_bytes": _peak_rss(), "peak_is_per_case": reset,
                       "stderr": outcome.stderr.strip().splitlines()[-1][:200] if outcome.stderr.strip() else ""})


class Pool:
    def __init__(self, base: Path, build: Path):
        self.base, self.build = base, build
        self.proc = None
        self.start()

    def start(self) -> None:
        ctx = mp.get_context("fork")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=worker, args=(child, str(self.base), str(self.build)), daemon=True)
        self.proc.start()

    def run(self, kind: str, seed: int) -> dict:
        self.conn.send((kind, seed))
        if self.conn.poll(CASE_TIMEOUT):
            try:
                return self.conn.recv()
            except EOFError:
                pass
        else:
            self.proc.kill()
        self.proc.join()
        code = self.proc.exitcode
        self.start()
        why = "hang" if code == -9 else f"crash (exit {code})"
        return {"kind": kind, "seed": seed, "what": "", "code": code, "problems": [why], "seconds": CASE_TIMEOUT,
                "findings": 0, "peak_bytes": 0, "peak_is_per_case": False, "stderr": why}

    def close(self) -> None:
        self.conn.send(None)
        self.proc.join(10)


def schedule(cases: int, seed: int, per_kind: int | None = None,
             only: list[str] | None = None) -> list[tuple[str, int]]:
    rnd = random.Random(seed)
    if per_kind is not None:
        return [(k, rnd.randrange(2**32)) for k in (only or KINDS) for _ in range(per_kind)]
    kinds = [k for k, share in KINDS.items() for _ in range(share) if not only or k in only]
    return [(rnd.choice(kinds), rnd.randrange(2**32)) for _ in range(cases)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=10000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--per-kind", type=int, help="run this many cases of each kind (instead of --cases)")
    parser.add_argument("--kind", action="append", choices=sorted(KINDS), help="only these kinds (repeatable)")
    parser.add_argument("--only", help="KIND:SEED of one case to rerun")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    from fuzzing import FUZZ_PRESET
    from helpers import mini_catalog

    from gpustack_sim.compiled import compile_catalog

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        base = mini_catalog(tmp)
        (base / "presets" / "fuzz.yaml").write_text(FUZZ_PRESET)
        build = tmp / "build"
        compile_catalog(REPO / "catalog", build)  # the commands' cases share one compiled catalog
        todo = ([(k, int(s)) for k, s in [args.only.split(":")]] if args.only
                else schedule(args.cases, args.seed, args.per_kind, args.kind))
        pool = Pool(base, build)
        results, start = [], time.perf_counter()
        try:
            for i, (kind, seed) in enumerate(todo, 1):
                results.append(pool.run(kind, seed))
                if not args.json and i % 100 == 0:
                    print(f"  {i} cases, {time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)
        finally:
            pool.close()
        shutil.rmtree(tmp, ignore_errors=True)
    report(results, time.perf_counter() - start, args)


def report(results: list[dict], seconds: float, args) -> None:
    bad = [r for r in results if r["problems"]]
    slowest = max(results, key=lambda r: r["seconds"])
    peak = max(results, key=lambda r: r["peak_bytes"])
    summary = {
        "cases": len(results), "seed": args.seed, "seconds": round(seconds, 1),
        "by_kind": {k: {"cases": len(rs), "failing": sum(bool(r["problems"]) for r in rs),
                        "max_case_seconds": round(max(r["seconds"] for r in rs), 2),
                        "peak_memory_MB": round(max(r["peak_bytes"] for r in rs) / 2**20, 1)}
                    for k in sorted({r["kind"] for r in results}) for rs in [[r for r in results if r["kind"] == k]]},
        "tracebacks": sum("traceback" in r["problems"] for r in results),
        "crashes_or_hangs": sum(any(p.startswith(("crash", "hang")) for p in r["problems"]) for r in results),
        "exit_codes": {str(k): v for k, v in sorted(Counter(r["code"] for r in results).items())},
        "findings": sum(r["findings"] for r in results),
        "findings_without_file_line": sum(sum(p.startswith("finding without") for p in r["problems"])
                                          for r in results),
        "max_case_seconds": round(slowest["seconds"], 2),
        "slowest_case": f"{slowest['kind']}:{slowest['seed']} ({slowest['what'][:80]})",
        "cases_over_10_s": sum(r["seconds"] > TARGET_SECONDS for r in results),
        "peak_memory_MB": round(peak["peak_bytes"] / 2**20, 1),
        "peak_memory_case": f"{peak['kind']}:{peak['seed']}",
        "peak_measured_per_case": all(r["peak_is_per_case"] for r in results),
        "failing_cases": [{k: r[k] for k in ("kind", "seed", "what", "code", "problems", "stderr")} for r in bad[:50]],
    }
    summary["targets_met"] = (not bad and summary["cases_over_10_s"] == 0
                              and peak["peak_bytes"] < TARGET_BYTES)
    if args.json:
        print(json.dumps(summary, indent=2))
        return
    for key, value in summary.items():
        if key != "failing_cases":
            print(f"{key:>28}: {value}")
    for r in summary["failing_cases"]:
        print(f"  FAIL {r['kind']}:{r['seed']} exit {r['code']} {r['problems']} {r['what'][:80]!r}: {r['stderr']}")


if __name__ == "__main__":
    main()
