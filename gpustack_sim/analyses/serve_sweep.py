"""`gpustack sweep` on a serving run: every serving layout on a grid (tensor, pipeline and expert
parallelism, replicas, prefill chunk), evaluated vectorized, the ones that cannot serve rejected with a
reason (shapes that do not split, or a requirement of catalog/bindings/serve_figures.yaml failed: no batch
fits, a latency objective missed, replicas saturated), the rest ranked by an objective such as the cost
per million output tokens.

The objective and every requirement's variable and limit are resolved once with the swept layout
variables left symbolic, compiled with lambdify, and evaluated on the whole grid with numpy.
"""

from __future__ import annotations

import itertools
import math
import time

import numpy as np

from gpustack_compiler.base.errors import InputError
from gpustack_compiler.base.limits import MAX_KEPT_LAYOUTS, refuse_over

from ..engine.bindings import FieldBinding, field_value
from ..engine.facts import Facts
from ..engine.resolver import ResolveError, Resolver
from ..engine.scenario import Scenario, ScenarioBuilder
from ..engine.serve_run import ServeRunSpec
from .sweep import SweepResult, read_values, shown
from .uncertainty import STAGE_LIMIT, vectorize_resolution

DEFAULT_OBJECTIVE = "cost_per_output_token"


def serve_sweep(resolver: Resolver, scenarios: ScenarioBuilder, facts: Facts, run: ServeRunSpec,
                grid: dict[str, list], objective: str | None, top: int) -> SweepResult:
    """`grid`: axis -> values, as text or as the serving run file would write them."""
    serving = facts.serving
    objective = objective or DEFAULT_OBJECTIVE
    if objective not in serving.objectives:
        raise InputError(f"--objective {objective!r}: one of {', '.join(serving.objectives)} for a serving run")
    target, best = serving.objectives[objective].variable, serving.objectives[objective].best
    axes = serving.fields.axes
    for key in grid:
        if key not in axes:
            raise InputError(f"--grid {key}: not a serving sweep axis (axes: {', '.join(axes)})")
    start = time.perf_counter()
    scenario = serving.fields.scenario(scenarios, run)

    def coded(b: FieldBinding, value) -> float:
        return scenarios.quantity(b.variable, b.bound(value), f"--grid {b.sweep}").value

    columns = grid_columns(axes, grid, coded, scenario)
    n = len(next(iter(columns.values())))
    column = layout_column(columns, run, n)
    swept = [b.variable for b in axes.values()]
    limits = [r.limit for r in serving.requirements if isinstance(r.limit, str)]
    names = list(dict.fromkeys([target, *(r.variable for r in serving.requirements), *limits]))
    resolved = resolver.resolve_many(names, scenario.holding(swept), stage_limit=STAGE_LIMIT)
    arrays = [columns[b.field] for b in axes.values()]
    values: dict[str, np.ndarray] = {}
    compiled: dict = {}
    for name in names:
        res = resolved[name]
        if isinstance(res, ResolveError):
            raise InputError(f"sweep: {name}: {res.message}", res.hint)
        if res.missing:
            raise InputError(f"sweep: {name} still needs {', '.join(sorted(res.missing))}", "add them to a preset")
        if res.value is not None:
            values[name] = np.full(n, res.value * resolver.variable(name).scale)
        else:
            fn = vectorize_resolution([resolver.symbol(v) for v in swept], res, (), compiled)
            with np.errstate(all="ignore"):
                values[name] = np.broadcast_to(np.asarray(fn(*arrays), dtype=float), (n,))
    reasons = _shape_rejections(run, column)
    with np.errstate(invalid="ignore"):
        for r in serving.requirements:
            have = values[r.variable]
            limit = values[r.limit] if isinstance(r.limit, str) else r.limit * resolver.variable(r.variable).scale
            ok = {"at_most": have <= limit, "at_least": have >= limit, "below": have < limit}[r.kind]
            reasons.append((r.label, ~ok))
    reasons.append(("model undefined (non-finite objective)", ~np.isfinite(values[target])))
    valid, rejected = tally(reasons, n)
    score = values[target] / resolver.variable(target).scale
    order = ranked(valid, score, best, top)
    gpus = column("layout.tp") * column("layout.pp") * column("layout.replicas")
    rows = [{**{k: shown(columns[b.field][i], None) for k, b in axes.items()}, objective: float(score[i]),
             "gpus": int(gpus[i])} for i in order]
    return SweepResult(objective, target, resolver.variable(target).units, n, int(valid.sum()), rejected, rows,
                       time.perf_counter() - start, [])


def _shape_rejections(run: ServeRunSpec, c) -> list[tuple[str, np.ndarray]]:
    """Layouts the model's shape cannot be split into."""
    m = run.model
    kv = m.kv_heads or m.heads
    tp, pp, ep = c("layout.tp"), c("layout.pp"), c("layout.ep")
    experts = m.moe.experts if m.moe is not None else 1
    return [
        ("heads not divisible by tp", np.mod(m.heads, tp) != 0),
        ("kv heads and tp do not divide each other", (np.mod(kv, tp) != 0) & (np.mod(tp, kv) != 0)),
        ("ffn hidden not divisible by tp", np.mod(m.ffn_hidden, tp) != 0),
        ("layers not divisible by pp", np.mod(m.layers, pp) != 0),
        ("experts not divisible by ep (or ep > 1 on a dense model)", np.mod(experts, ep) != 0),
        ("ep exceeds the replica's GPUs", ep > tp * pp),
    ]


# A serving grid is small (hundreds of layouts, each a full resolve of the latency figures): it is built
# whole, unlike the streamed training sweep.
def grid_columns(axes: dict[str, FieldBinding], grid: dict[str, list], coded, scenario: Scenario) -> dict[str, np.ndarray]:
    """Run-file field -> its value at every grid point (base units): the product of the grid's axes, the
    run's own value on the others."""
    on_grid = [k for k in axes if k in grid]
    refuse_over(math.prod(len(grid[k]) for k in on_grid), MAX_KEPT_LAYOUTS, "--grid: layouts on a serving grid "
                f"({' x '.join(str(len(grid[k])) for k in on_grid)})", "sweep fewer values per axis")
    lists = [[coded(axes[k], v) for v in read_values(axes[k], grid[k], ServeRunSpec)] for k in on_grid]
    points = list(zip(*itertools.product(*lists))) if on_grid else [()]
    n = len(points[0]) if on_grid else 1
    columns = {axes[k].field: np.array(v, dtype=float) for k, v in zip(on_grid, points)}
    for b in axes.values():
        columns.setdefault(b.field, np.full(n, scenario.assignments[b.variable].value))
    return columns


def layout_column(columns: dict[str, np.ndarray], run: ServeRunSpec, n: int):
    """A layout field per grid point: its column when it is an axis, else the run's own value."""
    def column(path: str) -> np.ndarray:
        return columns[path] if path in columns else np.full(n, float(field_value(run, path)))
    return column


def tally(reasons: list[tuple[str, np.ndarray]], n: int) -> tuple[np.ndarray, dict[str, int]]:
    """The valid layouts, and the rejected ones counted under the first reason that rejects each."""
    valid = np.ones(n, dtype=bool)
    rejected: dict[str, int] = {}
    for reason, mask in reasons:
        new = mask & valid
        if new.any():
            rejected[reason] = int(new.sum())
        valid &= ~mask
    return valid, rejected


def ranked(valid: np.ndarray, score: np.ndarray, best: str, top: int) -> np.ndarray:
    """Indices of the `top` valid layouts, best first (ties in grid order)."""
    order = np.flatnonzero(valid)
    return order[np.argsort(-score[order] if best == "max" else score[order], kind="stable")][:top]
