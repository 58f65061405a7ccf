"""`gpustack sweep`: every layout on a grid, evaluated vectorized, the invalid ones rejected with a
reason, the valid ones ranked by an objective.

The objective and the memory per GPU are resolved once with the swept layout variables left symbolic,
compiled with lambdify, and evaluated with numpy. The grid is never held whole: it is cut into chunks of
flat grid indices, each chunk's layouts are built from its indices, the cheap structural checks run
first and the compiled model only on the layouts that pass them; a chunk keeps its best `top` and its
counts of rejections by reason. Memory per worker is bounded by the chunk size, whatever the grid's.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from gpustack_compiler.base.errors import InputError
from gpustack_compiler.base.limits import MAX_GRID_LAYOUTS, MAX_KEPT_LAYOUTS, refuse_over

from ..distributed import Backend, chunk_ranges
from ..engine.bindings import FieldBinding
from ..engine.facts import Facts
from ..engine.resolver import ResolveError, Resolver
from ..engine.run import RunSpec
from ..engine.scenario import ScenarioBuilder
from .uncertainty import STAGE_LIMIT, Symbolic, vectorize_resolution

# The GPU count is fixed: unless it is swept, data parallelism follows from the other degrees.
DERIVED = "layout.dp"
# Layouts per chunk: about 20 float columns of this length and their temporaries, some tens of MB.
CHUNK = 1 << 18
REJECTIONS = (
    "tp*pp*dp*cp differs from the GPU count",
    "heads not divisible by tp",
    "kv heads and tp do not divide each other",
    "ffn hidden not divisible by tp",
    "a stage's layers not divisible by interleave",
    "interleaving without pipeline parallelism",
    "global batch not divisible by dp x micro batch",
    "interleaved schedule needs micro-batches divisible by pp",
    "sequence parallelism needs tp > 1",
    "recomputed modules with full recomputation",
    "does not fit in HBM",
    "model undefined (non-finite objective)",
)


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

    def to_dict(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "seconds"}


def sweep(resolver: Resolver, scenarios: ScenarioBuilder, facts: Facts, run: RunSpec, grid: dict[str, list],
          objective: str, top: int, backend: Backend | None = None, progress=None) -> SweepResult:
    """`grid`: axis -> values, as text or as the run file would write them. `progress(done, total)` is told
    of chunks done."""
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
    grid_values = [np.array([coded(axes[k], v) for v in read_values(axes[k], grid[k])], dtype=float) for k in on_grid]
    fixed = {b.field: float(scenario.assignments[b.variable].value) for k, b in axes.items() if k not in grid}

    swept = [b.variable for b in axes.values()]
    held = scenario.holding(swept)
    names = (target, mem.per_gpu, mem.capacity)
    resolved = resolver.resolve_many(list(names), held, stage_limit=STAGE_LIMIT)
    programs: dict[str, float | Symbolic] = {}
    notes = []
    zero: tuple[str, ...] = ()
    for name in names:
        res = resolved[name]
        if isinstance(res, ResolveError):
            raise InputError(f"sweep: {name}: {res.message}", res.hint)
        if name == mem.per_gpu and set(res.missing) == {mem.buffers}:
            # runtime buffers have no source: memory fit is judged before them (as the estimate states it)
            zero = (mem.buffers,)
            notes.append(f"memory fit judged before runtime buffers ({mem.buffers} has no source)")
        elif res.missing:
            raise InputError(f"sweep: {name} still needs {', '.join(sorted(res.missing))}", "add them to a preset")
        scale = resolver.variable(name).scale
        programs[name] = res.value * scale if res.value is not None else Symbolic(res.symbolic, res.stages)
    m = run.model
    plan = Plan(fields=tuple(b.field for b in axes.values()), symbols=[resolver.symbol(v) for v in swept],
                grid_fields=tuple(axes[k].field for k in on_grid), grid_values=grid_values, fixed=fixed,
                derive_dp=not any(axes[k].field == DERIVED for k in grid), gpus=float(run.gpus),
                model=(m.heads, fields.value(run, "model.kv_heads"), m.ffn_hidden, m.layers,
                       run.layout.global_batch, run.layout.first_stage_layers, run.layout.last_stage_layers,
                       run.layout.recompute_modules.any),
                programs=programs, zero=zero, names=names, scale=resolver.variable(target).scale,
                descending=best == "max", top=top)
    n = plan.size
    refuse_over(n, MAX_GRID_LAYOUTS, "--grid: layouts on the grid "
                f"({' x '.join(str(len(v)) for v in grid_values) or '1'})", "sweep fewer values per axis")
    refuse_over(min(n, top), MAX_KEPT_LAYOUTS, "layouts kept (--top, or every valid one for --plot)",
                "a smaller grid, or no --plot")
    parts = (backend or Backend()).map(_chunk, plan, chunk_ranges(n, CHUNK), progress)

    counts = np.sum([p.rejected for p in parts], axis=0, dtype=np.int64)
    index = np.concatenate([p.index for p in parts])
    score = np.concatenate([p.score for p in parts])
    memory = np.concatenate([p.memory for p in parts])
    order = plan.best(index, score)
    columns = plan.columns(index[order])
    names_of = {k: {coded(b, key): key for key in b.values} for k, b in axes.items() if b.read == "enumeration"}
    rows = [{**{k: shown(_at(columns[b.field], j), names_of.get(k)) for k, b in axes.items()},
             objective: float(score[i]),
             "memory_per_gpu_GB": float(memory[i] / 8e9)} for j, i in enumerate(order)]
    return SweepResult(objective, target, resolver.variable(target).units, n, int(sum(p.valid for p in parts)),
                       {r: int(c) for r, c in zip(REJECTIONS, counts) if c}, rows, time.perf_counter() - start,
                       notes)


@dataclass
class ChunkResult:
    """A chunk's counts of rejections (in the order of REJECTIONS), its valid count, and its best layouts:
    flat grid index, objective (declared units), memory per GPU (bits)."""

    rejected: np.ndarray
    valid: int
    index: np.ndarray
    score: np.ndarray
    memory: np.ndarray


@dataclass
class Plan:
    """A sweep as a worker sees it: the grid's axes, the run's constants, and the objective and memory as
    constants or symbolic values in the swept variables (compiled once per process)."""

    fields: tuple[str, ...]  # of every sweep axis, in the order of `symbols`
    symbols: list
    grid_fields: tuple[str, ...]  # of the axes on the grid, the last varying fastest
    grid_values: list[np.ndarray]  # coded, base units
    fixed: dict[str, float]  # the other axes' fields at the run's values
    derive_dp: bool
    gpus: float
    model: tuple  # heads, kv heads, ffn hidden, layers, global batch, first and last stage layers (or None),
    # whether the run recomputes modules
    programs: dict  # target, memory per GPU, capacity -> base-unit constant or Symbolic
    zero: tuple[str, ...]
    names: tuple[str, str, str]
    scale: float  # of the objective's declared unit
    descending: bool
    top: int
    _fns: dict | None = None

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_fns": None}

    @property
    def size(self) -> int:
        return math.prod(len(v) for v in self.grid_values)  # Python ints: a huge grid must not wrap around

    def columns(self, index: np.ndarray) -> dict[str, np.ndarray | float]:
        """Each axis field at the flat grid indices: a column on the grid, a number off it."""
        cols: dict[str, np.ndarray | float] = dict(self.fixed)
        if self.grid_fields:
            shape = tuple(len(v) for v in self.grid_values)
            for f, values, i in zip(self.grid_fields, self.grid_values, np.unravel_index(index, shape)):
                cols[f] = values[i]
        if self.derive_dp:
            cols[DERIVED] = self.gpus / (cols["layout.tp"] * cols["layout.pp"] * cols["layout.cp"])
        return cols

    def evaluate(self, cols: dict, n: int) -> list[np.ndarray]:
        """Objective, memory per GPU and capacity (base units) of `n` layouts."""
        if self._fns is None:
            compiled: dict = {}
            self._fns = {name: vectorize_resolution(self.symbols, p, self.zero, compiled)
                         for name, p in self.programs.items() if isinstance(p, Symbolic)}
        arrays = [cols[f] for f in self.fields]
        return [np.full(n, p) if not isinstance(p, Symbolic) else
                np.broadcast_to(np.asarray(self._fns[name](*arrays), dtype=float), (n,))
                for name, p in self.programs.items()]

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


def _chunk(plan: Plan, span: tuple[int, int]) -> ChunkResult:
    index = np.arange(*span, dtype=np.int64)
    counts = np.zeros(len(REJECTIONS), dtype=np.int64)
    with np.errstate(all="ignore"):
        cols = plan.columns(index)
        valid = np.ones(len(index), dtype=bool)
        for k, mask in enumerate(_structural(plan, cols)):
            new = np.broadcast_to(mask, valid.shape) & valid
            counts[k] = np.count_nonzero(new)
            valid &= ~new
        keep = np.flatnonzero(valid)
        cols = {f: (c[keep] if isinstance(c, np.ndarray) else c) for f, c in cols.items()}
        objective, used, cap = plan.evaluate(cols, len(keep))
        fits = used <= cap
        finite = np.isfinite(objective)
        k = len(REJECTIONS) - 2
        counts[k] = np.count_nonzero(~fits)
        counts[k + 1] = np.count_nonzero(fits & ~finite)
        ok = np.flatnonzero(fits & finite)
        score = objective[ok] / plan.scale
    at = plan.best(index[keep[ok]], score)
    return ChunkResult(counts, len(ok), index[keep[ok]][at], score[at], used[ok][at])


def _structural(plan: Plan, c: dict) -> list:
    """The layout checks that need no model, in the order of REJECTIONS."""
    heads, kv, ffn, layers, global_batch, first, last, modules = plan.model

    def not_divisible(a, b):
        return np.mod(a, b) != 0

    tp, pp, dp, cp = c["layout.tp"], c["layout.pp"], c["layout.dp"], c["layout.cp"]
    interleave, sp = c["layout.interleave"], c["layout.sequence_parallel"]
    micro = global_batch / (dp * c["layout.micro_batch"])
    if first is None:
        per_stage = layers / pp
    else:
        # Uneven first and last stages: the slowest stage holds the chunks the interleave divides.
        middle = np.where(pp > 2, (layers - first - last) / np.maximum(pp - 2, 1), 0)
        per_stage = np.maximum(np.maximum(first, last), middle)
    return [
        (tp * pp * dp * cp != plan.gpus) | (dp < 1) | not_divisible(dp, 1),
        not_divisible(heads, tp),
        not_divisible(kv, tp) & not_divisible(tp, kv),
        not_divisible(ffn, tp),
        not_divisible(per_stage, interleave),
        (interleave > 1) & (pp == 1),
        not_divisible(micro, 1),
        (interleave > 1) & not_divisible(micro, pp),
        (sp > 0) & (tp == 1),
        # full recomputation reruns every module already (LayoutSpec refuses the pair in a run file)
        (c["layout.recompute"] == 2) & modules,
    ]


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
