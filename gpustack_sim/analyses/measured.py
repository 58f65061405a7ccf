"""Measured evidence as rows to predict: observations (data/observations, the form the repository keeps)
and CSV rows in the calibration data's columns (catalog/bindings/measured_runs.yaml says how a CSV row
becomes a run). `calibrate` fits to rows; `validate` predicts and scores them."""

from __future__ import annotations

import csv
import json
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from pydantic import ValidationError

from gpustack_compiler.base.errors import InputError
from gpustack_compiler.base.limits import MAX_CSV_BYTES, read_text

from ..engine.facts import MeasuredRuns
from ..engine.observation import Component, Decision, Loaded
from ..engine.run import RunSpec, set_field
from ..engine.scenario import ScenarioBuilder

# The columns whose keys stand for presets (catalog/bindings/measured_runs.yaml).
HARDWARE, PRECISION = "hardware", "precision"
# A hardware cell may name catalog presets directly, joined by this.
PRESET_JOIN = "+"


@dataclass(frozen=True)
class Setup:
    """What sets up a measurement made outside a run, as a component benchmark's block does: presets in order,
    then assignments (a local learning condition has assignments alone)."""

    presets: tuple[str, ...] = ()
    assign: dict = field(default_factory=dict)
    variants: dict = field(default_factory=dict)


@dataclass
class Row:
    """One measured figure to predict, in its target variable's declared units."""

    id: str  # the observation id, or <csv stem>:<row>
    panel: str
    where: str  # file:line
    label: str
    run: RunSpec | None  # None for a component benchmark
    target: str
    measured: float
    low: float  # the measurement's uncertainty interval
    high: float
    decision: Decision | None = None
    source: str | None = None  # reference key and locator
    assumptions: tuple[str, ...] = ()  # run fields the source does not report
    ids: tuple[str, ...] = field(default=())  # every observation behind the row (replicates are one row)
    component: Component | Setup | None = None  # the benchmark's or learning condition's setup, instead of a run


# ---- observations ----------------------------------------------------------------------------------

def check_sources(items: list[Loaded], references: Collection[str]) -> None:
    """Every observation cites a key of catalog/references.yaml (bad data: refused, naming the line)."""
    for item in items:
        if item.obs.source.reference not in references:
            raise InputError(f"{item.where}: source.reference: `{item.obs.source.reference}` is not a key of "
                             "catalog/references.yaml", "add the reference to the catalog first")


def observation_row(item: Loaded, scenarios: ScenarioBuilder, runs: MeasuredRuns) -> Row:
    """The row an observation stands for; InputError when the catalog cannot take it (unknown variable,
    units that do not fit it, a FLOP convention that is not the variable's)."""
    obs = item.obs
    target = obs.measures.variable
    var = scenarios.variable(target, item.where)
    counted = runs.flop_conventions.get(target)
    given = obs.measures.flop_convention
    if counted is not None and given != counted:
        raise InputError(f"{item.where}: measures.flop_convention: {target} counts FLOPs by the {counted} "
                         f"convention, the observation says {given or 'nothing'}")
    if counted is None and given is not None:
        raise InputError(f"{item.where}: measures.flop_convention: {target} is not a FLOP rate or utilization "
                         "of any convention (catalog/bindings/measured_runs.yaml, flop_conventions)")
    m = obs.measured
    scale = var.scale

    def declared(value: float) -> float:
        return scenarios.quantity(target, f"{value!r} {m.units}", item.where).value / scale

    source = f"{obs.source.reference}, {obs.source.locator}"
    setup = obs.component
    if item.run is not None:
        label = item.run.name
    elif setup is not None:
        label = f"{setup.generation} component"
    else:
        setup = Setup(assign={**obs.learning.assign, LOST_PER_ROLLBACK: _lost_per_rollback(item)})
        label = f"learning condition {obs.learning.condition}"
    return Row(obs.id, obs.panel, item.where, label, item.run, target, declared(m.value),
               declared(m.uncertainty.low), declared(m.uncertainty.high), obs.decision, source,
               tuple(a.field for a in obs.assumptions), (obs.id,), setup)


# The condition root a local learning row's curves give (their rollback events), not its config.
LOST_PER_ROLLBACK = "learning.fault.steps_lost_per_rollback"


def _lost_per_rollback(item: Loaded) -> float:
    """Steps lost per rollback over every seed's curve (0 without rollbacks): what the workload's checkpoint
    interval made of its rollbacks, as its events counted them."""
    lost = rollbacks = 0
    for rel in item.obs.learning.curves:
        path = item.file.parent / rel
        try:
            events = json.loads(path.read_text(encoding="utf-8"))["events"]
            lost, rollbacks = lost + int(events["lost_steps"]), rollbacks + int(events["rollbacks"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise InputError(f"{item.where}: learning.curves: {rel}: no readable rollback events ({exc})") from None
    return lost / rollbacks if rollbacks else 0.0


# ---- CSV rows --------------------------------------------------------------------------------------

def read_rows(path: Path, runs: MeasuredRuns, presets: set[str]) -> list[Row]:
    """Rows of a CSV with the calibration columns plus a measured figure; errors name the row. `presets`:
    the catalog's preset names, which a hardware or precision cell may give instead of a key."""
    # utf-8-sig: a spreadsheet's byte-order mark would otherwise become part of the first column's name
    lines = read_text(path, MAX_CSV_BYTES, "CSV file", encoding="utf-8-sig").splitlines()
    body = [(n + 1, line) for n, line in enumerate(lines) if line.strip() and not line.lstrip().startswith("#")]
    if not body:
        raise InputError(f"{path}: no header and no rows")
    reader = csv.DictReader([line for _, line in body])
    header = reader.fieldnames or []
    absent = [c for c in [*runs.columns, HARDWARE, PRECISION] if c not in header]
    if absent:
        raise InputError(f"{path}:{body[0][0]}: missing column(s) {', '.join(absent)}")
    rows = []
    for i, record in enumerate(reader):
        line = body[i + 1][0]
        where = f"{path}:{line} (row {i + 1})"
        if None in record or None in record.values():  # a short row has None cells, a long one a None key
            cells = len(next(csv.reader([body[i + 1][1]])))
            raise InputError(f"{where}: {cells} cells, the header has {len(header)}")
        _ascii_digits(record, where)
        try:
            rows.append(_row(f"{path.stem}:{i + 1}", path.stem, f"{path}:{line}", record, where, runs, presets))
        except (ValueError, KeyError) as exc:
            raise InputError(f"{where}: {exc}") from None
    if not rows:
        raise InputError(f"{path}: no data rows")
    return rows


def _ascii_digits(record: dict[str, str], where: str) -> None:
    """Numbers are written with ASCII digits (as in run files): Python's int() and float() would read a
    full-width `５` or an Arabic-Indic `٥` as 5."""
    for column, cell in record.items():
        odd = next((ch for ch in cell if ch.isdigit() and not ch.isascii()), None)
        if odd is not None:
            raise InputError(f"{where}: column {column}: {cell!r} has the non-ASCII digit {odd!r} (U+{ord(odd):04X})",
                             "write numbers with the digits 0-9")


def _hardware(cell: str, where: str, runs: MeasuredRuns, presets: set[str]) -> list[str]:
    if cell in runs.hardware:
        return runs.hardware[cell]
    names = [n.strip() for n in cell.split(PRESET_JOIN)]
    if all(n in presets for n in names):
        return names
    raise InputError(f"{where}: unknown hardware key {cell!r} (known: {', '.join(sorted(runs.hardware))}; "
                     f"or catalog presets joined by {PRESET_JOIN!r})")


def _row(id: str, panel: str, at: str, r: dict, where: str, runs: MeasuredRuns, presets: set[str]) -> Row:
    hardware = _hardware(r[HARDWARE].strip(), where, runs, presets)
    cell = r[PRECISION].strip()
    precision = runs.precision.get(cell) or (cell if cell in presets else None)
    if precision is None:
        raise InputError(f"{where}: unknown precision {cell!r} (known: {', '.join(sorted(runs.precision))}; "
                         "or a catalog precision preset)")
    target, measured = _measured(r, where, runs)
    data: dict = {}
    for column, path in runs.columns.items():
        set_field(data, path, r[column].strip())
    for path, value in runs.fields.items():
        set_field(data, path, value)
    # A row is one measured iteration: its token budget is one global batch.
    data["tokens"] = f"{int(data['layout']['global_batch']) * int(data['model']['seq_len'])} token"
    data.update({"precision": precision, "hardware": hardware, "presets": list(runs.presets),
                 "assign": dict(runs.assign)})
    try:
        run = RunSpec.model_validate(data)
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        path = ".".join(str(p) for p in err["loc"])
        column = next((c for c, f in runs.columns.items() if f == path), None)
        field = f"{path} (column {column}): " if column else (f"{path}: " if path else "")
        raise InputError(f"{where}: {field}{err['msg']}") from None
    # The CSV states no uncertainty: the interval is the value itself.
    return Row(id, panel, at, f"{run.name} {run.layout.recompute}", run, target, measured, measured, measured,
               ids=(id,))


def _measured(r: dict, where: str, runs: MeasuredRuns) -> tuple[str, float]:
    """The variable a row measures and its measured value: the first measure column the row fills in."""
    column = next((c for c in runs.measures if (r.get(c) or "").strip()), None)
    if column is None:
        raise InputError(f"{where}: needs a measured figure in one of the columns {', '.join(runs.measures)}")
    measure = runs.measures[column]
    target = measure.get("variable")
    if target is None:
        conventions = measure["by_convention"]
        target = conventions.get((r.get(runs.convention_column) or "").strip())
        if target is None:
            raise InputError(f"{where}: {column} needs {runs.convention_column} {' or '.join(sorted(conventions))}")
    measured = float(r[column])
    if measured <= 0 or not np.isfinite(measured):
        raise InputError(f"{where}: the measured figure must be a positive number")
    return target, measured
