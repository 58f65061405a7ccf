"""The search beside Calculon (NVIDIA's open-source LLM performance model), in one run on one machine.

Both evaluate GPT-3 175B (96 layers, hidden 12288, 96 heads, sequence 2048) on 1,024 A100 80GB GPUs with a
global batch of 1,536: Calculon its models/gpt3-175B.json on systems/a100_80g.json, gpustack
runs/gpt3_175b_a100.yaml at gpus=1024, global_batch=1536. The unit is the model evaluation (one layout
through the model, valid or not), counted per CPU second of this process: the machine may be shared, and
CPU time is what a loaded machine does not inflate. Targets (issue 44): evaluations per CPU second >= 50x
Calculon's; every valid layout of the model (all tp, pp, dp, micro-batch, interleave, recompute, ZeRO and
sequence-parallel choices) in <= 2 s; one estimate in process at or below Calculon's one evaluation; a
`gpustack estimate` process <= 0.5 s with warm caches.

Calculon is not a dependency and none of its code is in this repository: point GPUSTACK_CALCULON (or
--calculon) at a checkout of https://github.com/NVlabs/calculon (it needs numpy, pandas and psutil); without
one its rows are skipped, saying so.

    python benchmarks/bench_sweep.py [--calculon DIR] [--budget 3] [--chunks]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from cli_process import median_wall

REPO = Path(__file__).resolve().parent.parent
RUN = REPO / "runs" / "gpt3_175b_a100.yaml"
SET = ["gpus=1024", "layout.dp=16", "layout.global_batch=1536"]
AXES = ("tp", "pp", "micro_batch", "interleave", "zero_stage", "recompute", "sequence_parallel")
GPUS, BATCH = 1024, 1536


def row(name: str, value: float | str, unit: str = "", target: str = "", ok: bool | None = None) -> str:
    verdict = "" if ok is None else ("  ok" if ok else "  MISSED")
    shown = f"{value:>14,.4g}" if isinstance(value, (int, float)) else f"{value:>14}"
    return f"{name:<64}{shown} {unit:<12}{target:>10}{verdict}"


def timed(fn):
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - wall, time.process_time() - cpu


# ---- Calculon -------------------------------------------------------------------------------------------

def calculon_layouts(llm, app: dict) -> list[dict]:
    """Calculon's own search space (its llm-optimal-execution loops), in order, each dimension on one network:
    tensor parallelism on the NVLink tier when it fits in it, pipeline and data parallelism on InfiniBand."""
    base = json.loads((CALCULON / "examples" / "3072_t4_p64_d12_mbs4_full.json").read_text())
    out = []
    for tp in llm.get_all_tensor_parallelisms(GPUS, app["hidden"], app["attn_heads"]):
        for pp in llm.get_all_pipeline_parallelisms(GPUS, tp, app["num_blocks"]):
            dp = llm.get_data_parallelism(GPUS, tp, pp)
            if BATCH % dp:
                continue
            for ppint in llm.get_valid_pipeline_interleavings(app["num_blocks"], pp):
                for recompute in ("full", "attn_only", "none"):
                    for sharding in ((True, False) if dp > 1 else (False,)):
                        for comm in ("ar", "p2p_rs_ag", "rs_ag"):
                            for mbs in llm.get_valid_microbatch_sizes(app["seq_size"], tp, dp, BATCH, pp):
                                out.append({**base, "num_procs": GPUS, "tensor_par": tp, "pipeline_par": pp,
                                            "data_par": dp, "batch_size": BATCH, "microbatch_size": mbs,
                                            "pipeline_interleaving": ppint, "activation_recompute": recompute,
                                            "optimizer_sharding": sharding, "tensor_par_comm_type": comm,
                                            "tensor_par_net": 0 if tp <= 8 else 1, "pipeline_par_net": 1,
                                            "data_par_net": 1,
                                            "seq_par_ag_redo": False, "tensor_par_overlap": "none"})
    return out


def calculon_rows(budget: float) -> tuple[list[str], dict]:
    sys.path.insert(0, str(CALCULON))
    (modules, wall, cpu) = timed(lambda: __import__("calculon"))
    from calculon import System
    from calculon.llm import Llm

    app_json = json.loads((CALCULON / "models" / "gpt3-175B.json").read_text())
    app, system = Llm.Application(app_json), System(json.loads((CALCULON / "systems" / "a100_80g.json").read_text()))
    log = logging.Logger("calculon")

    def evaluate(exe: dict) -> float | None:
        try:
            model = Llm(app, log)
            model.compile(system, Llm.Execution.from_json(exe))
            model.run(system)
            return model.get_stats_json(False)["sample_rate"]
        except Llm.Error:
            return None

    layouts = calculon_layouts(Llm, app_json)
    # a layout Calculon finds valid, Megatron's shape for the model (tp 8, pp 8, micro-batch 1)
    one = next(e for e in layouts if e["tensor_par"] == 8 and e["pipeline_par"] == 8 and e["microbatch_size"] == 1
               and evaluate(e) is not None)
    singles = [timed(lambda: evaluate(one))[2] for _ in range(5)]
    start, done, good = time.process_time(), 0, 0
    wall = time.perf_counter()
    # spread over the whole space (its first layouts are all tp 1, which do not fit), in a fixed order
    for exe in layouts[::max(1, len(layouts) // 1000)]:
        good += evaluate(exe) is not None
        done += 1
        if time.process_time() - start > budget:
            break
    cpu_s = time.process_time() - start
    rate = done / cpu_s
    process = calculon_process(one)
    rows = [row("Calculon: import", cpu, "s CPU"),
            row(f"Calculon: one valid evaluation (tp 8, pp 8, {one['activation_recompute']}), median of 5", statistics.median(singles) * 1e3, "ms CPU"),
            row(f"Calculon: {done:,} of its {len(layouts):,} layouts ({good:,} valid)", cpu_s, "s CPU"),
            row(f"  wall {time.perf_counter() - wall:.2f} s; evaluations per CPU second", rate, "eval/CPU s"),
            row("Calculon: `calculon llm` process on one layout, median of 3", process, "s wall")]
    return rows, {"rate": rate, "one": statistics.median(singles), "layouts": len(layouts), "process": process}


def calculon_process(exe: dict, repeat: int = 3) -> float:
    """Median wall time of `calculon llm` on one layout as a fresh process."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "exe.json"
        path.write_text(json.dumps(exe))
        cmd = [sys.executable, str(CALCULON / "bin" / "calculon"), "llm", str(CALCULON / "models" / "gpt3-175B.json"),
               str(path), str(CALCULON / "systems" / "a100_80g.json"), str(Path(tmp) / "stats.json")]
        walls = []
        for _ in range(repeat):
            start = time.perf_counter()
            subprocess.run(cmd, check=True, capture_output=True, env={**os.environ, "PYTHONPATH": str(CALCULON)})
            walls.append(time.perf_counter() - start)
    return statistics.median(walls)


# ---- gpustack -----------------------------------------------------------------------------------------

def gpustack_rows(calculon: dict | None, chunks: bool) -> list[str]:
    from gpustack_sim import Engine
    from gpustack_sim.analyses import sweep as sweep_module
    from gpustack_sim.analyses.sweep import parse_grid

    rows = []
    grid = parse_grid([f"{a}=all" for a in AXES])
    with tempfile.TemporaryDirectory() as build:
        def engine():
            return Engine.open(REPO / "catalog", build)

        eng, wall, cpu = timed(engine)
        run = eng.load_run(RUN, SET)
        cold, wall, cpu = timed(lambda: eng.sweep(run, grid))
        eng.keep_parsed()
        rows.append(row(f"every layout, cold (parse, resolve, compile): {cold.grid_points:,} grid points", wall,
                        "s wall", "<= 2", wall <= 2))
        rows.append(row(f"  {cold.evaluated:,} layouts evaluated, {cold.valid:,} valid", cpu, "s CPU"))
        cold_rate = cold.evaluated / cpu
        rows.append(row("  evaluations per CPU second, end to end", cold_rate, "eval/CPU s"))
        warm_engine = engine()  # a new process's engine: the numeric model comes from the build cache
        warm_engine.sweep(warm_engine.load_run(RUN, SET), {"tp": ["8"]})  # reads the cache file once
        warm, wall, cpu = timed(lambda: warm_engine.sweep(run, grid))
        assert warm.to_dict() == cold.to_dict()
        rows.append(row("every layout, warm (numeric model from the build cache)", wall, "s wall", "<= 2", wall <= 2))
        rows.append(row(f"  of which evaluating the model {warm.model_seconds:.3f} s wall", cpu, "s CPU"))
        warm_rate = warm.evaluated / cpu
        rows.append(row("  evaluations per CPU second, end to end", warm_rate, "eval/CPU s"))
        if calculon:
            for label, rate in (("cold", cold_rate), ("warm", warm_rate)):
                ratio = rate / calculon["rate"]
                rows.append(row(f"  x Calculon's evaluations per CPU second, {label}", ratio, "x", ">= 50",
                                ratio >= 50))
        rows.append(f"  best: {json.dumps({k: v for k, v in warm.top[0].items()})}")
        rows.append(f"  grid points skipped: {warm.skipped}")
        rows.append(f"  rejected by the catalog: {warm.rejected}")

        one = []
        for _ in range(5):
            one.append(timed(lambda: warm_engine.sweep(run, {"tp": ["8"]}))[2])
        target = f"<= {calculon['one'] * 1e3:.3g}" if calculon else ""
        rows.append(row("one layout through the cached model, in process, median of 5", statistics.median(one) * 1e3,
                        "ms CPU", target, statistics.median(one) <= calculon["one"] if calculon else None))
        warm_engine.estimate(run)
        est = [timed(lambda: warm_engine.estimate(run))[2] for _ in range(3)]
        rows.append(row("one estimate in process (figures, traces, 10,000-sample intervals)", statistics.median(est)
                        * 1e3, "ms CPU", target, statistics.median(est) <= calculon["one"] if calculon else None))

        if chunks:
            rows.extend(chunk_rows(warm_engine, run, grid, sweep_module))
        args = ["--catalog", str(REPO / "catalog"), "--build-dir", build, "estimate", str(RUN),
                *[a for s in SET for a in ("--set", s)]]
        median_wall(args, 1)  # fills the caches an estimate reads
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        process = median_wall(args, 3)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) / 3
        rows.append(row("`gpustack estimate` process, warm caches, median of 3", process, "s wall", "<= 0.5",
                        process <= 0.5))
        rows.append(row("  its CPU time, mean of the 3 (imports: sympy alone ~0.6 s)", cpu, "s CPU"))
    return rows


def chunk_rows(eng, run, grid, sweep_module) -> list[str]:
    rows, default = [], sweep_module.CHUNK
    try:
        for power in range(12, 19):
            sweep_module.CHUNK = 1 << power
            times = [eng.sweep(run, grid).model_seconds for _ in range(2)]
            cpu = min(timed(lambda: eng.sweep(run, grid))[2] for _ in range(2))
            rows.append(row(f"  chunk 2^{power}: evaluating, best of 2 (end to end CPU {cpu:.3f} s)", min(times),
                            "s wall", "(shipped)" if 1 << power == default else ""))
    finally:
        sweep_module.CHUNK = default
    return rows


def main() -> None:
    global CALCULON
    parser = argparse.ArgumentParser()
    parser.add_argument("--calculon", type=Path, default=os.environ.get("GPUSTACK_CALCULON"))
    parser.add_argument("--budget", type=float, default=3.0, help="CPU seconds of Calculon evaluations")
    parser.add_argument("--chunks", action="store_true", help="also time the sweep's evaluation per chunk size")
    args = parser.parse_args()
    print(f"{'benchmark':<64}{'value':>14} {'unit':<12}{'target':>10}")
    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} (CPU seconds are this process's)")
    calculon = None
    CALCULON = args.calculon
    if CALCULON is None or not (Path(CALCULON) / "calculon" / "llm").is_dir():
        print(f"Calculon: skipped (no checkout at {CALCULON}; set GPUSTACK_CALCULON or --calculon to a clone of "
              "https://github.com/NVlabs/calculon)")
    else:
        CALCULON = Path(CALCULON)
        lines, calculon = calculon_rows(args.budget)
        print("\n".join(lines))
    print("\n".join(gpustack_rows(calculon, args.chunks)))


CALCULON: Path | None = None

if __name__ == "__main__":
    main()
