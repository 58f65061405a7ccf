"""`gpustack sweep`: the layouts of a grid, evaluated vectorized, the invalid ones rejected with a
reason, the valid ones ranked by an objective.

The grid's layouts are generated, not filtered (layouts.py): a grid point that is no layout of the job (the
degrees' product not the GPU count, a micro-batch that does not split the batch) never reaches the model and
is counted apart. The objective, the memory per GPU and the catalog's own constraints and validity
conditions met on the way are resolved once with the swept layout variables left symbolic, compiled with
lambdify, and evaluated with numpy on chunks of the generated layouts; a layout is rejected by the first
condition it breaks (the same ones an estimate of that layout warns about), by the memory fit, or by an
objective the model leaves undefined. The symbolic model is kept in the build cache (engine/cache.py) by the
catalog, the code and the run, so a second sweep of the run pays none of its symbolic work.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np

from gpustack_compiler.base.errors import InputError
from gpustack_compiler.base.limits import MAX_GRID_LAYOUTS, MAX_KEPT_LAYOUTS, refuse_over

from ..distributed import Backend, chunk_ranges
from ..engine.bindings import FieldBinding
from ..engine.cache import remembered, run_key
from ..engine.facts import Facts
from ..engine.resolver import ResolveError, Resolver
from ..engine.run import RunSpec
from ..engine.scenario import Scenario, ScenarioBuilder
from .layouts import DERIVED, Layouts, every_value, generate
from .uncertainty import STAGE_LIMIT, from_source, stage_source

# Layouts per chunk, chosen by measurement (benchmarks/bench_sweep.py --chunks): some tens of float columns of
# this length and their temporaries stay within the caches; at 2^18 they page-fault and evaluation is 2.4x
# slower.
CHUNK = 1 << 15
MEMORY_FIT = "does not fit in HBM"
UNDEFINED = "model undefined (non-finite objective)"
ALL = "all"  # `--grid tp=all`: every value of the axis that can be part of a layout of the run


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
    seconds: float  # wall time: reported on stderr, kept out of the output so that it is byte-identical
    notes: list[str]
    grid_points: int | None = None  # points of the grid; `evaluated` counts those that are layouts
    skipped: dict[str, int] = field(default_factory=dict)  # grid points that are no layout, by rule
    model_seconds: float = 0.0  # of `seconds`, evaluating the generated layouts (wall time, off the output)

    def to_dict(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k not in ("seconds", "model_seconds")}

    def timing(self) -> str:
        """The wall times, and model evaluations per second of evaluating (not grid points per second)."""
        line = f"swept {self.evaluated} layouts in {self.seconds:.2f} s"
        if self.model_seconds > 0:
            line += (f" ({self.model_seconds:.3f} s evaluating the model: "
                     f"{self.evaluated / self.model_seconds:,.0f} evaluations/s)")
        return line


def sweep(resolver: Resolver, scenarios: ScenarioBuilder, facts: Facts, run: RunSpec, grid: dict[str, list],
          objective: str, top: int, backend: Backend | None = None, progress=None,
          trials: int | None = None, seed: int = 0) -> SweepResult:
    """`grid`: axis -> values, as text or as the run file would write them (`all`: every value that can be
    part of a layout). `progress(done, total)` is told of chunks done. With `trials`, the grid is searched
    (search.py) instead of enumerated, with the same layouts, conditions and objective."""
    if objective not in facts.objectives:
        raise InputError(f"--objective {objective!r}: one of {', '.join(facts.objectives)}")
    target, best = facts.objectives[objective].variable, facts.objectives[objective].best
    fields, mem = facts.run_fields, facts.memory
    axes = fields.axes
    for key in grid:
        if key not in axes:
            raise InputError(f"--grid {key}: not a sweep axis (axes: {', '.join(axes)})")
        if not len(grid[key]):
            raise InputError(f"--grid {key}: no values")
    start = time.perf_counter()
    scenario = fields.scenario(scenarios, run)

    def coded(b: FieldBinding, value) -> float:
        # The value the swept variable takes, in coherent base units, as the scenario would hold it.
        return scenarios.quantity(b.variable, b.bound(value), f"--grid {b.sweep}").value

    on_grid = [k for k in axes if k in grid]
    values = {k: every_value(axes[k], run) if [str(v) for v in grid[k]] == [ALL] else read_values(axes[k], grid[k])
              for k in on_grid}
    # Python ints: a huge grid must not wrap around
    refuse_over(math.prod(len(v) for v in values.values()), MAX_GRID_LAYOUTS, "--grid: points on the grid "
                f"({' x '.join(str(len(v)) for v in values.values()) or '1'})", "sweep fewer values per axis")
    derive_dp = not any(axes[k].field == DERIVED for k in grid)
    columns = {b.field: np.array([coded(b, v) for v in values[k]] if k in values
                                 else [float(scenario.assignments[b.variable].value)], dtype=float)
               for k, b in axes.items() if not (derive_dp and b.field == DERIVED)}
    recompute = next((b for b in axes.values() if b.field == "layout.recompute"), None)
    full = coded(recompute, "full") if recompute is not None and run.layout.recompute_modules.any else None
    names_of = {k: {coded(b, key): key for key in b.values} for k, b in axes.items() if b.read == "enumeration"}

    def rows_of(cols: dict, order: np.ndarray, score: np.ndarray, memory: np.ndarray) -> list[dict]:
        return [{**{k: shown(_at(cols[b.field], j), names_of.get(k)) for k, b in axes.items()},
                 objective: float(score[i]), "memory_per_gpu_GB": float(memory[i] / 8e9)} for j, i in enumerate(order)]

    def layouts_of(cols: dict) -> Layouts:
        return generate(cols, tuple(axes[k].field for k in on_grid), float(run.gpus), float(run.layout.global_batch),
                        full)

    if trials is None:
        layouts = layouts_of(columns)
        refuse_over(min(layouts.size, top), MAX_KEPT_LAYOUTS, "layouts kept (--top, or every valid one for --plot)",
                    "a smaller grid, or no --plot")
    model = numeric_model(resolver, scenario, [b.variable for b in axes.values()], (target, mem.per_gpu, mem.capacity),
                          mem.buffers)
    if trials is not None:
        from .search import search

        if backend is not None and backend.client is not None:
            raise InputError("--trials searches in this process: drop --workers/--scheduler")
        plan = Plan(fields=tuple(b.field for b in axes.values()),
                    symbols=[resolver.symbol(b.variable) for b in axes.values()], layouts=None, model=model,
                    scale=resolver.variable(target).scale, descending=best == "max", top=top)
        found = search(plan, columns, tuple(axes[k].field for k in on_grid), layouts_of, trials, seed)
        order = plan.best(found.index, found.score)
        return SweepResult(objective, target, resolver.variable(target).units, found.evaluated, found.valid,
                           found.rejected, rows_of(found.columns(order), order, found.score, found.memory),
                           time.perf_counter() - start, [*model.notes, *found.notes], found.grid_points,
                           found.skipped, found.model_seconds)
    plan = Plan(fields=tuple(b.field for b in axes.values()), symbols=[resolver.symbol(b.variable) for b in axes.values()],
                layouts=layouts, model=model, scale=resolver.variable(target).scale, descending=best == "max", top=top)
    n = layouts.size
    plan.compile()  # here, so that the evaluation time is evaluation's (a worker compiles its own copy)
    evaluating = time.perf_counter()
    parts = (backend or Backend()).map(_chunk, plan, chunk_ranges(n, CHUNK), progress)
    model_seconds = time.perf_counter() - evaluating

    counts = np.sum([p.rejected for p in parts], axis=0, dtype=np.int64) if parts else np.zeros(len(plan.reasons))
    index = np.concatenate([p.index for p in parts]) if parts else np.zeros(0, dtype=np.int64)
    score = np.concatenate([p.score for p in parts]) if parts else np.zeros(0)
    memory = np.concatenate([p.memory for p in parts]) if parts else np.zeros(0)
    at = np.concatenate([p.at for p in parts]) if parts else np.zeros(0, dtype=np.int64)
    order = plan.best(index, score)
    cols, _ = layouts.at(at[order])
    return SweepResult(objective, target, resolver.variable(target).units, n, int(sum(p.valid for p in parts)),
                       {r: int(c) for r, c in zip(plan.reasons, counts) if c}, rows_of(cols, order, score, memory),
                       time.perf_counter() - start,
                       list(model.notes), layouts.grid_points, layouts.skipped, model_seconds)


@dataclass
class NumericModel:
    """A run's objective, memory per GPU and capacity in the swept variables, with the conditions
    (constraints, validity) they leave open, each a boolean of the swept variables: compiled, as the
    sources of numpy functions (uncertainty.stage_source), so that the build cache can keep it whole.
    Stages come first, in an order that puts each after those it reads."""

    stages: list[tuple[str, list[str], str]]  # name, names read, source
    programs: list[float | tuple[list[str], str]]  # target, memory per GPU, capacity: constant or compiled
    conditions: dict[str, tuple[list[str], str]]  # in the order they are judged
    zero: tuple[str, ...]  # names read as 0 (runtime buffers, which have no source)
    notes: tuple[str, ...]


def numeric_model(resolver: Resolver, scenario: Scenario, swept: list[str], names: tuple[str, str, str],
                  buffers: str) -> NumericModel:
    """The symbolic resolution of `names` with `swept` held, compiled; from the build cache when this
    catalog, code and run resolved it before."""
    held = scenario.holding(swept)
    return remembered(resolver.memo, run_key("numeric model", held, names, STAGE_LIMIT),
                      lambda: _numeric_model(resolver, held, swept, names, buffers))


def _numeric_model(resolver: Resolver, held: Scenario, swept: list[str], names: tuple[str, str, str],
                   buffers: str) -> NumericModel:
    opened: dict = {}
    resolved = resolver.resolve_many(list(names), held, stage_limit=STAGE_LIMIT, conditions=opened)
    programs: list = []
    stages: dict = {}
    notes, zero = [], ()
    for name in names:
        res = resolved[name]
        if isinstance(res, ResolveError):
            raise InputError(f"sweep: {name}: {res.message}", res.hint)
        if name == names[1] and set(res.missing) == {buffers}:
            # runtime buffers have no source: memory fit is judged before them (as the estimate states it)
            zero = (buffers,)
            notes.append(f"memory fit judged before runtime buffers ({buffers} has no source)")
        elif res.missing:
            raise InputError(f"sweep: {name} still needs {', '.join(sorted(res.missing))}", "add them to a preset")
        if res.value is not None:
            programs.append(res.value * resolver.variable(name).scale)
        else:
            programs.append(stage_source(res.symbolic))
            stages.update(res.stages)
    given = set(swept) | set(zero)
    conditions = []
    for name, (_kind, condition, used) in opened.items():
        free = {s.name for s in condition.free_symbols} | {s.name for v in used.values() for s in v.free_symbols}
        # Open in a root the run leaves missing, a condition is as undetermined for a layout as for the
        # estimate, which does not call it violated either.
        if free - set(used) <= given:
            conditions.append((len(free & given), name, condition))
            stages.update(used)
    # The conditions that read fewer of the layout first (divisibility before memory), then by name.
    return NumericModel([(n, *stage_source(s)) for n, s in _ordered(stages)], programs,
                        {name: stage_source(c) for _, name, c in sorted(conditions, key=lambda c: c[:2])},
                        zero, tuple(notes))


@dataclass
class ChunkResult:
    """A chunk's counts of rejections (in the order of Plan.reasons), its valid count, and its best layouts:
    grid index, position among the generated layouts, objective (declared units), memory per GPU (bits)."""

    rejected: np.ndarray
    valid: int
    index: np.ndarray
    at: np.ndarray
    score: np.ndarray
    memory: np.ndarray


@dataclass
class Plan:
    """A sweep as a worker sees it: the generated layouts and the numeric model (compiled once per
    process)."""

    fields: tuple[str, ...]  # of every sweep axis, in the order of `symbols`
    symbols: list
    layouts: Layouts | None  # None when the grid is searched (search.py) instead
    model: NumericModel
    scale: float  # of the objective's declared unit
    descending: bool
    top: int
    _fns: tuple | None = None

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_fns": None}

    @property
    def reasons(self) -> list[str]:
        """Rejections in the order they are judged: the catalog's conditions, then the memory fit and an
        undefined objective."""
        return [*self.model.conditions, MEMORY_FIT, UNDEFINED]

    def compile(self) -> None:
        if self._fns is None:
            self._fns = _compiled(self.model)

    def evaluate(self, cols: dict, n: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """Objective, memory per GPU and capacity (base units), and each condition, of `n` layouts."""
        self.compile()
        steps, programs, conditions = self._fns
        env = {s.name: np.broadcast_to(cols[f], (n,)) for s, f in zip(self.symbols, self.fields)}
        env.update({z: 0.0 for z in self.model.zero})
        for name, f in steps:
            env[name] = f(env)
        values = [np.broadcast_to(np.asarray(f(env), dtype=float), (n,)) for f in programs]
        held = [np.broadcast_to(np.asarray(f(env), dtype=bool), (n,)) for f in conditions]
        return values, held

    def judge(self, cols: dict, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Of `n` layouts: the first reason (position in `reasons`) each is rejected for, -1 when valid; the
        objective in its declared units; memory per GPU (bits)."""
        reason = np.full(n, -1, dtype=np.int64)
        with np.errstate(all="ignore"):
            (objective, used, cap), held = self.evaluate(cols, n)
            for k, mask in enumerate([*held, used <= cap, np.isfinite(objective)]):
                reason[(reason < 0) & ~mask] = k
            return reason, objective / self.scale, used

    def best(self, index: np.ndarray, score: np.ndarray) -> np.ndarray:
        """Positions of the best `top`, best first, ties by grid index: the order a stable sort of the whole
        grid gives, whatever the chunks."""
        key = -score if self.descending else score
        if len(key) > self.top:
            # Everything tied with the top-th value stays in, so the tie-break by index is exact.
            kth = np.partition(key, self.top - 1)[self.top - 1]
            near = np.flatnonzero(key <= kth)
        else:
            near = np.arange(len(key))
        return near[np.lexsort((index[near], key[near]))][:self.top]


def _compiled(model: NumericModel) -> tuple[list, list, list]:
    """A function of the values so far per stage, program and condition."""
    steps = [(name, from_source(names, source)) for name, names, source in model.stages]
    programs = [(lambda env, v=p: v) if isinstance(p, float) else from_source(*p) for p in model.programs]
    return steps, programs, [from_source(*c) for c in model.conditions.values()]


def _ordered(stages: dict) -> list[tuple[str, object]]:
    """Stages with each after those it reads (a resolution's own stages already are; several merged may not)."""
    out, done = [], set()

    def visit(name: str) -> None:
        if name in done:
            return
        done.add(name)
        for s in stages[name].free_symbols:
            if s.name in stages:
                visit(s.name)
        out.append((name, stages[name]))

    for name in stages:
        visit(name)
    return out


def _chunk(plan: Plan, span: tuple[int, int]) -> ChunkResult:
    cols, index = plan.layouts.at(np.arange(*span, dtype=np.int64))
    reason, score, used = plan.judge(cols, len(index))
    counts = np.bincount(reason[reason >= 0], minlength=len(plan.reasons))
    ok = np.flatnonzero(reason < 0)
    at = plan.best(index[ok], score[ok])
    return ChunkResult(counts, len(ok), index[ok][at], ok[at] + span[0], score[ok][at], used[ok][at])


def _at(column, j: int) -> float:
    return column[j] if isinstance(column, np.ndarray) else column


def read_values(b: FieldBinding, values: list, run_model: type = RunSpec) -> list:
    try:
        return [b.parse(v, run_model) for v in values]
    except ValueError as exc:
        raise InputError(f"--grid {b.sweep}: {exc}") from None


def shown(code: float, names: dict | None):
    """A sweep row's value of an axis: an enumeration by its key, a number as a number."""
    if names is not None:
        return names[code]
    return int(code) if float(code).is_integer() else float(code)
