"""Calibration and validation against measured training iterations.

Each CSV row (the columns of `training_iterations.csv`) becomes a run; the step time is resolved
symbolically in the fitted parameters and compiled once per row, and a damped Gauss-Newton fit on log
residuals finds the parameters. Deterministic: no random start, no sampling.

Only the files in the calibration data folder may be fitted to; `validate` only predicts and scores.
"""

from __future__ import annotations

import csv
import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import sympy
from pydantic import ValidationError

from gpustack_compiler.errors import InputError
from gpustack_compiler.models import Quantity

from ..engine.bindings import RunFields
from ..engine.facts import Facts, Held, MeasuredRuns, Parameter
from ..engine.resolver import ResolveError, Resolver
from ..engine.run import RunSpec, set_field
from ..engine.scenario import ScenarioBuilder
from .uncertainty import vectorize

# The columns whose keys stand for presets (catalog/bindings/measured_runs.yaml).
HARDWARE, PRECISION = "hardware", "precision"


@dataclass
class Row:
    index: int  # 1-based data row (header is line 1 of the file's table)
    line: int
    label: str
    run: RunSpec
    target: str
    measured: float  # in the target's declared units


def read_rows(path: Path, runs: MeasuredRuns, extra_presets: list[str]) -> list[Row]:
    """Rows of a CSV with the calibration columns plus a measured figure; errors name the row."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror or exc})") from None
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
        try:
            rows.append(_row(i + 1, line, record, where, runs, extra_presets))
        except (ValueError, KeyError) as exc:
            raise InputError(f"{where}: {exc}") from None
    if not rows:
        raise InputError(f"{path}: no data rows")
    return rows


def _row(index: int, line: int, r: dict, where: str, runs: MeasuredRuns, extra_presets: list[str]) -> Row:
    hardware = r[HARDWARE]
    if hardware not in runs.hardware:
        raise InputError(f"{where}: unknown hardware key {hardware!r} (known: {', '.join(sorted(runs.hardware))})")
    precision = runs.precision.get(r[PRECISION])
    if precision is None:
        raise InputError(f"{where}: unknown precision {r[PRECISION]!r} (known: {', '.join(sorted(runs.precision))})")
    target, measured = _measured(r, where, runs)
    data: dict = {}
    for column, path in runs.columns.items():
        set_field(data, path, r[column].strip())
    for path, value in runs.fields.items():
        set_field(data, path, value)
    # A row is one measured iteration: its token budget is one global batch.
    data["tokens"] = f"{int(data['layout']['global_batch']) * int(data['model']['seq_len'])} token"
    data.update({"precision": precision, "hardware": runs.hardware[hardware],
                 "presets": [*runs.presets, *extra_presets], "assign": dict(runs.assign)})
    try:
        run = RunSpec.model_validate(data)
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        path = ".".join(str(p) for p in err["loc"])
        column = next((c for c, f in runs.columns.items() if f == path), None)
        field = f"{path} (column {column}): " if column else (f"{path}: " if path else "")
        raise InputError(f"{where}: {field}{err['msg']}") from None
    return Row(index, line, f"{run.name} {run.layout.recompute}", run, target, measured)


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


class RowModels:
    """Each row's figure as a compiled function of the fitted parameters (in base units)."""

    def __init__(self, resolver: Resolver, scenarios: ScenarioBuilder, fields: RunFields, rows: list[Row],
                 params: tuple[Parameter, ...], held: tuple[Held, ...]):
        self.resolver, self.rows, self.params = resolver, rows, params
        held_at = scenarios.build(assign={h.root: Quantity(value=h.value, units=h.units) for h in held})
        self.symbols = [sympy.Symbol(p.key, positive=True) for p in params]
        self.functions = []
        for row in rows:
            scenario = fields.scenario(scenarios, row.run)
            scenario.assignments.update(held_at.assignments)
            roots = [r for p in params for r in p.roots]
            held = scenario.holding(roots)
            try:
                res = resolver.resolve(row.target, held)
            except ResolveError as exc:
                raise InputError(f"row {row.index} ({row.label}): {exc.message}", exc.hint) from None
            if res.missing:
                raise InputError(f"row {row.index} ({row.label}): {row.target} still needs "
                                 f"{', '.join(sorted(res.missing))}", "add them to a preset")
            expr = res.symbolic if res.value is None else sympy.Float(res.value * self._scale(row.target))
            tie = {resolver.symbol(r): s for p, s in zip(params, self.symbols) for r in p.roots}
            self.functions.append(vectorize(self.symbols, expr.xreplace(tie)))

    def _scale(self, name: str) -> float:
        return self.resolver.variable(name)["scale"]

    def predict(self, theta: np.ndarray) -> np.ndarray:
        """Predictions in each row's declared units."""
        return np.array([float(f(*theta)) / self._scale(r.target) for f, r in zip(self.functions, self.rows)])


@dataclass
class Fit:
    values: dict[str, float]
    sds: dict[str, float | None]  # None: the parameter ended at a bound (not identified)
    predicted: list[float]
    iterations: int


def fit(models: RowModels, max_iterations: int = 200) -> Fit:
    """Levenberg-Marquardt on log(predicted / measured), parameters clipped to their bounds."""
    measured = np.array([r.measured for r in models.rows])
    lo = np.array([p.low for p in models.params])
    hi = np.array([p.high for p in models.params])
    theta = np.array([p.initial for p in models.params])

    def residuals(t: np.ndarray) -> np.ndarray:
        return np.log(models.predict(t) / measured)

    def jacobian(t: np.ndarray) -> np.ndarray:
        cols = []
        for j in range(len(t)):
            h = 1e-6 * max(abs(t[j]), 1e-3)
            up, down = t.copy(), t.copy()
            up[j], down[j] = min(t[j] + h, hi[j]), max(t[j] - h, lo[j])
            cols.append((residuals(up) - residuals(down)) / (up[j] - down[j]))
        return np.stack(cols, axis=1)

    lam, r = 1e-3, residuals(theta)
    cost = float(r @ r)
    iterations = 0
    for iterations in range(1, max_iterations + 1):
        J = jacobian(theta)
        A, g = J.T @ J, J.T @ r
        step = np.linalg.solve(A + lam * np.diag(np.diag(A) + 1e-12), -g)
        trial = np.clip(theta + step, lo, hi)
        r_trial = residuals(trial)
        cost_trial = float(r_trial @ r_trial)
        if cost_trial < cost:
            converged = abs(cost - cost_trial) <= 1e-14 * max(cost, 1e-30)
            theta, r, cost, lam = trial, r_trial, cost_trial, lam / 3
            if converged or np.max(np.abs(step)) <= 1e-10:
                break
        else:
            lam *= 5
            if lam > 1e12:
                break
    J = jacobian(theta)
    dof = max(len(r) - len(theta), 1)
    cov = np.linalg.pinv(J.T @ J) * (cost / dof)
    sds = np.sqrt(np.clip(np.diag(cov), 0, None))
    keys = [p.key for p in models.params]
    # A parameter stopped by its bound is not identified by the data: it gets no uncertainty.
    at_bound = {k for k, t, a, b in zip(keys, theta, lo, hi) if min(t - a, b - t) <= 1e-9 * max(abs(b), 1.0)}
    return Fit(dict(zip(keys, map(float, theta))),
               {k: (None if k in at_bound else float(sd)) for k, sd in zip(keys, sds)},
               list(map(float, models.predict(theta))), iterations)


def errors(predicted: list[float], measured: list[float]) -> dict:
    p, m = np.array(predicted), np.array(measured)
    rel = (p - m) / m
    return {"mape": float(np.mean(np.abs(rel))), "max_abs_error": float(np.max(np.abs(rel))),
            "bias": float(np.mean(rel))}


def spearman(a: list[float], b: list[float]) -> float:
    def ranks(x):
        order = np.argsort(x, kind="stable")
        out = np.empty(len(x))
        out[order] = np.arange(len(x))
        return out

    ra, rb = ranks(np.array(a)), ranks(np.array(b))
    if len(a) < 2 or np.std(ra) == 0 or np.std(rb) == 0:
        return float("nan")
    return float(np.corrcoef(ra, rb)[0, 1])


def data_hash(paths: list[Path]) -> str:
    h = hashlib.sha256()
    for path in sorted(paths):
        h.update(path.name.encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


def calibration_yaml(result, stats: dict, digest: str, n_rows: int, files: list[str], params: tuple[Parameter, ...],
                     held: tuple[Held, ...]) -> str:
    """The calibration preset, written by hand so the file is stable byte for byte."""
    lines = ["# yaml-language-server: $schema=../../schemas/presets.schema.json",
             "# Written by `gpustack calibrate`; do not edit by hand. Fitted only to the calibration data folder.",
             "presets:", "  - name: calibration",
             "    description: >-",
             "      Efficiency parameters fitted to the calibration data: measured seconds per iteration of",
             "      four GPT-style models on A100 (Korthikanti et al. 2022, Table 5), by damped Gauss-Newton",
             "      on log(predicted / measured). Roots in one group share one fitted value.",
             "    provenance: fitted",
             "    source: gpustack calibrate on shared/data/calibration (training_iterations.csv, hardware.yaml)",
             "    references: [korthikanti2022_recompute]",
             "    fit:",
             "      method: Levenberg-Marquardt on log residuals; sd from the residual variance and the Jacobian",
             f"      data: [{', '.join(files)}]",
             f"      data_sha256: {digest}",
             f"      rows: {n_rows}",
             f"      mape: {stats['mape']:.6g}",
             f"      max_abs_error: {stats['max_abs_error']:.6g}",
             f"      bias: {stats['bias']:.6g}",
             "    assignments:"]
    for p in params:
        for root in p.roots:
            sd = result.sds[p.key]
            spread = f", sd: {sd:.3g}" if sd is not None else ""
            note = f"fitted, group {p.key}" + ("" if sd is not None else "; stopped at its bound, not identified")
            lines.append(f"      {root}: {{value: {result.values[p.key]:.6g}{spread}, "
                         f"reference: korthikanti2022_recompute, note: \"{note}\"}}")
    for h in held:
        lines.append(f"      {h.root}: {{value: {h.value:g}, units: \"{h.units}\", "
                     f"reference: korthikanti2022_recompute, note: \"held fixed in the fit: {h.reason}\"}}")
    return "\n".join(lines) + "\n"


@dataclass
class Calibration:
    """A fit of the calibration parameters to a calibration data folder, and the preset it makes."""

    data_dir: Path
    rows: list[dict]
    parameters: dict[str, dict]
    stats: dict
    data_sha256: str
    iterations: int
    preset_text: str

    def to_dict(self) -> dict:
        return {"data": str(self.data_dir), "parameters": self.parameters, "rows": self.rows, **self.stats,
                "data_sha256": self.data_sha256, "iterations": self.iterations}


DATA_FILES = ("training_iterations.csv", "hardware.yaml")


def calibrate(resolver: Resolver, scenarios: ScenarioBuilder, facts: Facts, data_dir: Path) -> Calibration:
    paths = [Path(data_dir) / name for name in DATA_FILES]
    for p in paths:
        if not p.is_file():
            raise InputError(f"calibration data {p} not found", "pass the calibration data folder")
    rows = read_rows(paths[0], facts.measured_runs, [])
    result = fit(RowModels(resolver, scenarios, facts.run_fields, rows, facts.parameters, facts.held))
    measured = [r.measured for r in rows]
    stats = errors(result.predicted, measured)
    digest = data_hash(paths)
    text = calibration_yaml(result, stats, digest, len(rows), [p.name for p in paths], facts.parameters, facts.held)
    table = [{"row": r.index, "run": r.label, "measured": m, "predicted": p, "error": (p - m) / m}
             for r, m, p in zip(rows, measured, result.predicted)]
    parameters = {k: {"value": v, "sd": result.sds[k]} for k, v in result.values.items()}
    return Calibration(Path(data_dir), table, parameters, stats, digest, result.iterations, text)
