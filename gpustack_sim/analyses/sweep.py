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

from ..engine.bindings import FieldBinding, field_value
from ..engine.facts import Facts
from ..engine.resolver import ResolveError, Resolver
from ..engine.run import RunSpec
from ..engine.scenario import Scenario, ScenarioBuilder
from .uncertainty import STAGE_LIMIT, vectorize_resolution

# The GPU count is fixed: unless it is swept, data parallelism follows from the other degrees.
DERIVED = "layout.dp"


def parse_grid(items: list[str]) -> dict[str, list[str]]:
    """`AXIS=V1,V2,...` items as axis -> values; each axis reads its values in `sweep`."""
    grid: dict[str, list[str]] = {}
    for item in items:
        key, sep, values = item.partition("=")
        if not sep or not key.strip():
            raise InputError(f"--grid {item!r}: expected AXIS=V1,V2,...")
        grid[key.strip()] = [v.strip() for v in values.split(",") if v.strip()]
        if not grid[key.strip()]:
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


def sweep(resolver: Resolver, scenarios: ScenarioBuilder, facts: Facts, run: RunSpec, grid: dict[str, list],
          objective: str, top: int) -> SweepResult:
    """`grid`: axis -> values, as text or as the run file would write them."""
    if objective not in facts.objectives:
        raise InputError(f"--objective {objective!r}: one of {', '.join(facts.objectives)}")
    target, best = facts.objectives[objective].variable, facts.objectives[objective].best
    fields, mem = facts.run_fields, facts.memory
    axes = fields.axes
    for key in grid:
        if key not in axes:
            raise InputError(f"--grid {key}: not a sweep axis (axes: {', '.join(axes)})")
    start = time.perf_counter()
    scenario = fields.scenario(scenarios, run)

    def coded(b: FieldBinding, value) -> float:
        # The value the swept variable takes, in coherent base units, as the scenario would hold it.
        return scenarios.quantity(b.variable, b.bound(value), f"--grid {b.sweep}").value

    columns = _grid(axes, grid, coded, scenario)
    n = len(next(iter(columns.values())))
    column = _column(columns, run, n)
    if not any(axes[k].field == DERIVED for k in grid):
        columns[DERIVED] = run.gpus / (column("layout.tp") * column("layout.pp") * column("layout.cp"))

    swept = [b.variable for b in axes.values()]
    held = scenario.holding(swept)
    names = [target, mem.per_gpu, mem.capacity]
    resolved = resolver.resolve_many(names, held, stage_limit=STAGE_LIMIT)
    arrays = [columns[b.field] for b in axes.values()]
    values = {}
    notes = []
    compiled: dict = {}
    for name in names:
        res = resolved[name]
        if isinstance(res, ResolveError):
            raise InputError(f"sweep: {name}: {res.message}", res.hint)
        zero: tuple[str, ...] = ()
        if name == mem.per_gpu and set(res.missing) == {mem.buffers}:
            # runtime buffers have no source: memory fit is judged before them (as the estimate states it)
            zero = (mem.buffers,)
            notes.append(f"memory fit judged before runtime buffers ({mem.buffers} has no source)")
        elif res.missing:
            raise InputError(f"sweep: {name} still needs {', '.join(sorted(res.missing))}", "add them to a preset")
        scale = resolver.variable(name).scale
        if res.value is not None:
            values[name] = np.full(n, res.value * scale)
        else:
            fn = vectorize_resolution([resolver.symbol(v) for v in swept], res, zero, compiled)
            with np.errstate(all="ignore"):
                values[name] = np.broadcast_to(np.asarray(fn(*arrays), dtype=float), (n,))
    reasons = _rejections(run, fields.value(run, "model.kv_heads"), column, values[mem.per_gpu],
                          values[mem.capacity], values[target])
    valid = np.ones(n, dtype=bool)
    rejected: dict[str, int] = {}
    for reason, mask in reasons:
        new = mask & valid
        if new.any():
            rejected[reason] = int(new.sum())
        valid &= ~mask
    scale = resolver.variable(target).scale
    score = values[target] / scale
    order = np.flatnonzero(valid)
    order = order[np.argsort(-score[order] if best == "max" else score[order], kind="stable")][:top]
    names_of = {k: {coded(b, key): key for key in b.values} for k, b in axes.items() if b.read == "enumeration"}
    rows = [{**{k: _shown(columns[b.field][i], names_of.get(k)) for k, b in axes.items()},
             objective: float(score[i]),
             "memory_per_gpu_GB": float(values[mem.per_gpu][i] / 8e9)} for i in order]
    return SweepResult(objective, target, resolver.variable(target).units, n, int(valid.sum()),
                       rejected, rows, time.perf_counter() - start, notes)


def _grid(axes: dict[str, FieldBinding], grid: dict[str, list], coded, scenario: Scenario) -> dict[str, np.ndarray]:
    """Run-file field -> its value at every grid point (base units): the product of the grid's axes, the
    run's own value on the others."""
    on_grid = [k for k in axes if k in grid]
    lists = [[coded(axes[k], v) for v in _read(axes[k], grid[k])] for k in on_grid]
    points = list(zip(*itertools.product(*lists))) if on_grid else [()]
    n = len(points[0]) if on_grid else 1
    columns = {axes[k].field: np.array(v, dtype=float) for k, v in zip(on_grid, points)}
    for b in axes.values():
        columns.setdefault(b.field, np.full(n, scenario.assignments[b.variable].value))
    return columns


def _read(b: FieldBinding, values: list) -> list:
    try:
        return [b.parse(v) for v in values]
    except ValueError as exc:
        raise InputError(f"--grid {b.sweep}: {exc}") from None


def _shown(code: float, names: dict | None):
    """A sweep row's value of an axis: an enumeration by its key, a number as a number."""
    if names is not None:
        return names[code]
    return int(code) if float(code).is_integer() else float(code)


def _column(columns: dict[str, np.ndarray], run: RunSpec, n: int):
    """A layout field per grid point: its column when it is an axis, else the run's own value."""
    def column(path: str) -> np.ndarray:
        return columns[path] if path in columns else np.full(n, float(field_value(run, path)))
    return column


def _rejections(run: RunSpec, kv: int, c, used: np.ndarray, cap: np.ndarray,
                objective: np.ndarray) -> list[tuple[str, np.ndarray]]:
    m = run.model

    def not_divisible(a, b):
        return np.mod(a, b) != 0

    tp, pp, dp, cp = c("layout.tp"), c("layout.pp"), c("layout.dp"), c("layout.cp")
    interleave, sp = c("layout.interleave"), c("layout.sequence_parallel")
    gpus = tp * pp * dp * cp
    micro = run.layout.global_batch / (dp * c("layout.micro_batch"))
    first, last = run.layout.first_stage_layers, run.layout.last_stage_layers
    if first is None:
        per_stage = m.layers / pp
    else:
        # Uneven first and last stages: the slowest stage holds the chunks the interleave divides.
        middle = np.where(pp > 2, (m.layers - first - last) / np.maximum(pp - 2, 1), 0)
        per_stage = np.maximum(np.maximum(first, last), middle)
    return [
        ("tp*pp*dp*cp differs from the GPU count", (gpus != run.gpus) | (dp < 1) | not_divisible(dp, 1)),
        ("heads not divisible by tp", not_divisible(m.heads, tp)),
        ("kv heads and tp do not divide each other", not_divisible(kv, tp) & not_divisible(tp, kv)),
        ("ffn hidden not divisible by tp", not_divisible(m.ffn_hidden, tp)),
        ("a stage's layers not divisible by interleave", not_divisible(per_stage, interleave)),
        ("interleaving without pipeline parallelism", (interleave > 1) & (pp == 1)),
        ("global batch not divisible by dp x micro batch", not_divisible(micro, 1)),
        ("interleaved schedule needs micro-batches divisible by pp", (interleave > 1) & not_divisible(micro, pp)),
        ("sequence parallelism needs tp > 1", (sp > 0) & (tp == 1)),
        ("does not fit in HBM", ~(used <= cap)),
        ("model undefined (non-finite objective)", ~np.isfinite(objective)),
    ]
