"""`gpustack sweep`: every layout on a grid, evaluated vectorized, the invalid ones rejected with a
reason, the valid ones ranked by an objective.

The objective and the memory per GPU are resolved once with the swept layout variables left symbolic,
compiled with lambdify, and evaluated on the whole grid with numpy.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass

import numpy as np

from gpustack_compiler.errors import InputError

from .estimate import BUFFERS, build_scenario
from ..engine.resolver import ResolveError, Resolver
from ..engine.run import RECOMPUTE, RunSpec
from ..engine.scenario import ScenarioBuilder
from .uncertainty import STAGE_LIMIT, vectorize_resolution

# grid key -> (catalog variable, how a grid value is read)
AXES = {
    "tp": ("par.tp", int), "pp": ("par.pp", int), "dp": ("par.dp", int), "cp": ("par.cp", int),
    "micro_batch": ("par.micro_batch", int), "interleave": ("par.pp_interleave", int),
    "zero_stage": ("par.zero.stage", int), "recompute": ("par.recompute.mode", lambda v: RECOMPUTE[v]),
    "sequence_parallel": ("par.sp", lambda v: int(v in ("1", "true", "yes"))),
}
OBJECTIVES = {
    "tokens_per_sec": ("training.tokens_per_sec", "max"),
    "cost_per_token": ("econ.cost.per_token", "min"),
    "energy_per_token": ("econ.run.energy_per_token", "min"),
    "step_time": ("training.t_step", "min"),
}
MEMORY = ("par.memory.per_gpu", "mem.hbm.capacity")


def parse_grid(items: list[str]) -> dict[str, list]:
    grid: dict[str, list] = {}
    for item in items:
        key, sep, values = item.partition("=")
        key = key.strip()
        if not sep or key not in AXES:
            raise InputError(f"--grid {item!r}: expected AXIS=V1,V2,... with AXIS one of {', '.join(AXES)}")
        read = AXES[key][1]
        try:
            grid[key] = [read(v.strip()) for v in values.split(",") if v.strip()]
        except (ValueError, KeyError):
            raise InputError(f"--grid {item!r}: cannot read the values") from None
        if not grid[key]:
            raise InputError(f"--grid {item!r}: no values")
    return grid


@dataclass
class SweepResult:
    objective: str
    target: str
    units: str
    evaluated: int
    valid: int
    rejected: dict[str, int]
    top: list[dict]
    seconds: float
    notes: list[str]

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def sweep(resolver: Resolver, scenarios: ScenarioBuilder, run: RunSpec, grid: dict[str, list], objective: str,
          top: int) -> SweepResult:
    if objective not in OBJECTIVES:
        raise InputError(f"--objective {objective!r}: one of {', '.join(OBJECTIVES)}")
    target, sense = OBJECTIVES[objective]
    start = time.perf_counter()
    lay = run.layout
    fixed = {"tp": lay.tp, "pp": lay.pp, "dp": lay.dp, "cp": lay.cp, "micro_batch": lay.micro_batch,
             "interleave": lay.interleave, "zero_stage": lay.zero_stage, "recompute": RECOMPUTE[lay.recompute],
             "sequence_parallel": int(lay.sequence_parallel)}
    derive_dp = "dp" not in grid  # the GPU count is fixed: dp follows from the rest
    axes = [k for k in AXES if k in grid or (k == "dp" and derive_dp)]
    if derive_dp:
        grid = {**grid, "dp": [0]}
    columns = {k: np.array(v, dtype=float) for k, v in zip(axes, zip(*itertools.product(*(grid[k] for k in axes))))}
    n = len(next(iter(columns.values())))
    for k, v in fixed.items():
        columns.setdefault(k, np.full(n, float(v)))
    if derive_dp:
        columns["dp"] = run.gpus / (columns["tp"] * columns["pp"] * columns["cp"])

    scenario = build_scenario(scenarios, run)
    swept = [AXES[k][0] for k in AXES]
    held = scenario.holding(swept)
    names = [target, *MEMORY]
    resolved = resolver.resolve_many(names, held, stage_limit=STAGE_LIMIT)
    arrays = [columns[k] for k in AXES]
    values = {}
    notes = []
    compiled: dict = {}
    for name in names:
        res = resolved[name]
        if isinstance(res, ResolveError):
            raise InputError(f"sweep: {name}: {res.message}", res.hint)
        zero: tuple[str, ...] = ()
        if name == MEMORY[0] and set(res.missing) == {BUFFERS}:
            # runtime buffers have no source: memory fit is judged before them (as the estimate states it)
            zero = (BUFFERS,)
            notes.append("memory fit judged before runtime buffers (par.memory.buffers has no source)")
        elif res.missing:
            raise InputError(f"sweep: {name} still needs {', '.join(sorted(res.missing))}", "add them to a preset")
        scale = resolver.variable(name)["scale"]
        if res.value is not None:
            values[name] = np.full(n, res.value * scale)
        else:
            fn = vectorize_resolution([resolver.symbol(v) for v in swept], res, zero, compiled)
            with np.errstate(all="ignore"):
                values[name] = np.broadcast_to(np.asarray(fn(*arrays), dtype=float), (n,))
    reasons = _rejections(run, columns, values, target)
    valid = np.ones(n, dtype=bool)
    rejected: dict[str, int] = {}
    for reason, mask in reasons:
        new = mask & valid
        if new.any():
            rejected[reason] = int(new.sum())
        valid &= ~mask
    scale = resolver.variable(target)["scale"]
    score = values[target] / scale
    order = np.flatnonzero(valid)
    order = order[np.argsort(-score[order] if sense == "max" else score[order], kind="stable")][:top]
    rows = [{**{k: (int(columns[k][i]) if k != "recompute" else _recompute_name(columns[k][i])) for k in AXES},
             objective: float(score[i]),
             "memory_per_gpu_GB": float(values[MEMORY[0]][i] / 8e9)} for i in order]
    return SweepResult(objective, target, resolver.variable(target)["units"], n, int(valid.sum()),
                       rejected, rows, time.perf_counter() - start, notes)


def _recompute_name(code: float) -> str:
    return {v: k for k, v in RECOMPUTE.items()}[int(code)]


def _rejections(run: RunSpec, c: dict[str, np.ndarray], values: dict, target: str) -> list[tuple[str, np.ndarray]]:
    m = run.model
    kv = m.kv_heads or m.heads

    def not_divisible(a, b):
        return np.mod(a, b) != 0

    gpus = c["tp"] * c["pp"] * c["dp"] * c["cp"]
    micro = run.layout.global_batch / (c["dp"] * c["micro_batch"])
    used, cap = values[MEMORY[0]], values[MEMORY[1]]
    return [
        ("tp*pp*dp*cp differs from the GPU count", (gpus != run.gpus) | (c["dp"] < 1) | not_divisible(c["dp"], 1)),
        ("heads not divisible by tp", not_divisible(m.heads, c["tp"])),
        ("kv heads and tp do not divide each other", not_divisible(kv, c["tp"]) & not_divisible(c["tp"], kv)),
        ("ffn hidden not divisible by tp", not_divisible(m.ffn_hidden, c["tp"])),
        ("layers not divisible by pp x interleave", not_divisible(m.layers, c["pp"] * c["interleave"])),
        ("interleaving without pipeline parallelism", (c["interleave"] > 1) & (c["pp"] == 1)),
        ("global batch not divisible by dp x micro batch", not_divisible(micro, 1)),
        ("interleaved schedule needs micro-batches divisible by pp",
         (c["interleave"] > 1) & not_divisible(micro, c["pp"])),
        ("sequence parallelism needs tp > 1", (c["sequence_parallel"] > 0) & (c["tp"] == 1)),
        ("does not fit in HBM", ~(used <= cap)),
        ("model undefined (non-finite objective)", ~np.isfinite(values[target])),
    ]
