"""The layouts a sweep evaluates, generated instead of filtered from a Cartesian grid.

A grid of tp x pp x dp x micro-batch x ... values is mostly points that are no layout of the job at all:
degrees whose product is not the GPU count, micro-batches that do not split the batch. Expanding the grid
axis by axis and dropping such points as soon as their axes are known keeps the work proportional to the
layouts that exist: the degrees are factorisations of the GPU count, the micro-batches divisors of a
replica's batch. What is dropped here is counted by rule and by the grid points it stands for, so that the
sweep can report grid points and model evaluations apart. Whether a generated layout is valid for the model
(heads divisible by tp, stages divisible by the interleave, fitting in memory) is the catalog's to say: its
constraints are evaluated on the generated layouts by the sweep.

Axes that no rule reads (zero_stage) are not expanded: a layout's index runs over the generated rows times
their Cartesian product, so memory stays bounded by the rows, whatever those axes multiply them by.
"""

from __future__ import annotations

import math
import typing
from dataclasses import dataclass

import numpy as np

from gpustack_compiler.base.errors import InputError

from ..engine.bindings import FieldBinding, run_field
from ..engine.run import RunSpec

DERIVED = "layout.dp"  # follows from the other degrees and the GPU count unless it is swept
RULES = (
    "tp*pp*dp*cp differs from the GPU count",
    "global batch not divisible by dp x micro batch",
    "interleaving without pipeline parallelism",
    "sequence parallelism needs tp > 1",
    "recomputed modules with full recomputation",
)
# The axes the rules read, in the order they are expanded: each rule runs as soon as its axes are in.
RULED = ("layout.tp", "layout.pp", "layout.cp", "layout.dp", "layout.micro_batch", "layout.interleave",
         "layout.sequence_parallel", "layout.recompute")
# At most this many generated rows are held (the free axes multiply them without being held).
MAX_ROWS = 4_000_000


def every_value(b: FieldBinding, run: RunSpec) -> list:
    """`--grid AXIS=all`: every value of the axis that can be part of a layout of this run."""
    f = b.field
    if f in ("layout.tp", "layout.pp", "layout.dp", "layout.cp"):
        return divisors(run.gpus)
    if f == "layout.micro_batch":
        return divisors(run.layout.global_batch)
    if f == "layout.interleave":
        return divisors(run.model.layers)
    if b.read == "enumeration":
        return list(b.values)
    if b.read == "boolean":
        return [False, True]
    choices = typing.get_args(run_field(f).annotation) if run_field(f) is not None else ()
    if choices and all(isinstance(c, int) for c in choices):
        return list(choices)
    raise InputError(f"--grid {b.sweep}=all: the axis has no finite set of values", "list its values")


def divisors(n: int) -> list[int]:
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


@dataclass
class Layouts:
    """Generated layouts: `rows` of the ruled axes (coded values), times the Cartesian product of the free
    axes. Layout k is row k // S with free combination k % S (S the product's size, the last free axis
    fastest); its grid index is that of the full grid, last axis fastest, as a stable sort of the grid would
    order ties."""

    rows: dict[str, np.ndarray]
    row_index: np.ndarray  # each row's part of the grid index
    free_fields: tuple[str, ...]
    free_values: list[np.ndarray]
    free_strides: list[int]  # grid strides of the free axes (0 off the grid)
    grid_points: int
    skipped: dict[str, int]  # grid points never generated, by the first rule they break

    @property
    def free_size(self) -> int:
        return math.prod(len(v) for v in self.free_values)

    @property
    def size(self) -> int:
        return len(self.row_index) * self.free_size

    def at(self, positions: np.ndarray) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """Columns (field -> coded values) and grid indices of the generated layouts at `positions`."""
        row, free = np.divmod(positions, self.free_size)
        cols = {f: v[row] for f, v in self.rows.items()}
        index = self.row_index[row]
        for f, values, stride in zip(reversed(self.free_fields), reversed(self.free_values),
                                     reversed(self.free_strides)):
            free, pos = np.divmod(free, len(values))
            cols[f] = values[pos]
            index = index + pos * stride
        return cols, index


def generate(axes: dict[str, np.ndarray], grid_fields: tuple[str, ...], gpus: float, global_batch: float,
             full_recompute: float | None) -> Layouts:
    """`axes`: every axis field -> its coded values (the grid's, or the run's one value off the grid), dp
    absent when it follows from the others. `grid_fields`: the axes on the grid, in grid order.
    `full_recompute`: the recompute axis's code for full recomputation when the run recomputes modules
    besides (the two do not go together), else None."""
    lengths = {f: len(axes[f]) for f in grid_fields}
    strides = {f: math.prod(lengths[g] for g in grid_fields[i + 1:]) for i, f in enumerate(grid_fields)}
    ruled = [f for f in RULED if f in axes]
    free = tuple(f for f in axes if f not in RULED)
    pending = {f: len(axes[f]) for f in axes}
    rows: dict[str, np.ndarray] = {}
    index = np.zeros(1, dtype=np.int64)
    skipped = dict.fromkeys(RULES, 0)
    for f in ruled:
        values = axes[f]
        n = len(index)
        rows = {g: np.repeat(c, len(values)) for g, c in rows.items()}
        rows[f] = np.tile(values, n)
        index = np.repeat(index, len(values)) + np.tile(np.arange(len(values)) * strides.get(f, 0), n)
        del pending[f]
        for rule, keep in _rules(rows, f, DERIVED not in axes, gpus, global_batch, full_recompute):
            dropped = int(np.count_nonzero(~keep))
            if dropped:
                skipped[rule] += dropped * math.prod(pending.values())
                rows = {g: c[keep] for g, c in rows.items()}
                index = index[keep]
        if len(index) > MAX_ROWS:
            raise InputError(f"--grid: more than {MAX_ROWS:,} layouts of {', '.join(ruled)} to hold",
                             "sweep fewer values of those axes, or search the grid with --trials N")
    return Layouts(rows, index, free, [axes[f] for f in free], [strides.get(f, 0) for f in free],
                   math.prod(lengths.values()), {r: c for r, c in skipped.items() if c})


def _rules(rows: dict, added: str, derive_dp: bool, gpus: float, global_batch: float, full: float | None):
    """(rule, rows that keep to it) for the rules whose axes are all in once `added` is; a derived dp joins
    the rows with the degrees it follows from."""
    if added == "layout.cp" and derive_dp:
        degrees = rows["layout.tp"] * rows["layout.pp"] * rows["layout.cp"]
        rows[DERIVED] = gpus / degrees
        yield RULES[0], np.mod(gpus, degrees) == 0
    elif added == DERIVED:
        yield RULES[0], rows["layout.tp"] * rows["layout.pp"] * rows["layout.cp"] * rows[DERIVED] == gpus
    elif added == "layout.micro_batch":
        yield RULES[1], np.mod(global_batch, rows[DERIVED] * rows["layout.micro_batch"]) == 0
    elif added == "layout.interleave":
        yield RULES[2], (rows["layout.interleave"] <= 1) | (rows["layout.pp"] > 1)
    elif added == "layout.sequence_parallel":
        yield RULES[3], (rows["layout.sequence_parallel"] <= 0) | (rows["layout.tp"] > 1)
    elif added == "layout.recompute":
        yield RULES[4], rows["layout.recompute"] != full if full is not None else np.ones(len(rows[added]), bool)
