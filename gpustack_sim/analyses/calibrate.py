"""Calibration: fitting the efficiency parameters to measured training iterations.

Each calibration observation (or row of a calibration data folder's `training_iterations.csv`) becomes a
run; its figure is resolved symbolically in the fitted parameters and compiled once per row, and a damped
Gauss-Newton fit on log residuals finds the parameters. Deterministic: no random start, no sampling.

Only calibration data may be fitted to: evaluation observations are refused by id, and the preset records
the ids it was fitted on, which `validate` then refuses to score.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import sympy

from gpustack_compiler.base.errors import InputError
from gpustack_compiler.language.models import Quantity

from ..engine.bindings import RunFields
from ..engine.facts import Facts, Held, Parameter
from ..engine.observation import Loaded, in_force, require_split
from ..engine.resolver import ResolveError, Resolver
from ..engine.run import RunSpec
from ..engine.scenario import Assigned, Scenario, ScenarioBuilder
from .measured import Row, check_sources, observation_row, read_rows
from .scoring import errors
from .uncertainty import vectorize


class RowModels:
    """Each row's figure as a compiled function of the fitted parameters (in base units). With
    `identified_only`, parameters none of whose roots any row depends on are dropped (not fitted)."""

    def __init__(self, resolver: Resolver, scenarios: ScenarioBuilder, fields: RunFields, rows: list[Row],
                 params: tuple[Parameter, ...], held: tuple[Held, ...], identified_only: bool = False):
        self.resolver, self.rows = resolver, rows
        held_at = scenarios.build(assign={h.root: Quantity(value=h.value, units=h.units) for h in held})
        roots = [r for p in params for r in p.roots]
        exprs = []
        for row in rows:
            if row.component is not None:
                c = row.component
                scenario = scenarios.build(c.presets, c.assign, c.variants, origin=row.where)
            else:
                scenario = fields.scenario(scenarios, row.run)
            scenario.assignments.update(held_at.assignments)
            try:
                res = resolver.resolve(row.target, scenario.holding(roots))
            except ResolveError as exc:
                raise InputError(f"{row.where} ({row.id}): {exc.message}", exc.hint) from None
            if res.missing:
                raise InputError(f"{row.where} ({row.id}): {row.target} still needs "
                                 f"{', '.join(sorted(res.missing))}", "add them to a preset")
            if res.value is None and res.symbolic.free_symbols - {resolver.symbol(r) for r in roots}:
                # A relation evaluated numerically (a differential's integral) has no closed form in the
                # fitted roots: the row is resolved afresh at each trial value instead.
                exprs.append((row.target, scenario))
            else:
                exprs.append(res.symbolic if res.value is None else sympy.Float(res.value * self._scale(row.target)))
        if identified_only:
            present = set().union(*(e.free_symbols for e in exprs if isinstance(e, sympy.Basic)))
            numeric = [_Numeric(resolver, *e, params) for e in exprs if not isinstance(e, sympy.Basic)]
            params = tuple(p for k, p in enumerate(params) if any(resolver.symbol(r) in present for r in p.roots)
                           or any(f.moves_with(k) for f in numeric))
        self.params = params
        self.symbols = [sympy.Symbol(p.key, positive=True) for p in params]
        tie = {resolver.symbol(r): s for p, s in zip(params, self.symbols) for r in p.roots}
        self.functions = [vectorize(self.symbols, e.xreplace(tie)) if isinstance(e, sympy.Basic)
                          else _Numeric(resolver, *e, params) for e in exprs]

    def _scale(self, name: str) -> float:
        return self.resolver.variable(name).scale

    def predict(self, theta: np.ndarray) -> np.ndarray:
        """Predictions in each row's declared units."""
        return np.array([float(f(*theta)) / self._scale(r.target) for f, r in zip(self.functions, self.rows)])


class _Numeric:
    """A row's figure at trial parameter values (base units), resolved numerically: the fitted roots are
    assigned and the resolver evaluates the relations, a differential's integral included."""

    def __init__(self, resolver: Resolver, target: str, scenario, params: tuple[Parameter, ...]):
        self.resolver, self.target, self.scenario, self.params = resolver, target, scenario, params

    def __call__(self, *theta: float) -> float:
        at = dict(self.scenario.assignments)
        for p, value in zip(self.params, theta):
            at.update({r: Assigned(float(value), "fit", f"{p.key} (fitted)") for r in p.roots})
        res = self.resolver.resolve(self.target, Scenario(at, dict(self.scenario.variants), list(self.scenario.presets),
                                                          frozenset(), list(self.scenario.modes)))
        return float("nan") if res.value is None else res.value * self.resolver.variable(self.target).scale

    def moves_with(self, k: int) -> bool:
        """Whether the figure moves when parameter k moves off its initial value (a root of a relation the
        row's condition switches off, or multiplies by zero, is not identified by it)."""
        theta = [p.initial for p in self.params]
        base = self(*theta)
        theta[k] = theta[k] * 1.01 + 1e-3 * (self.params[k].high - self.params[k].low)
        return self(*theta) != base


@dataclass
class Fit:
    values: dict[str, float]
    sds: dict[str, float | None]  # None: at a bound (not identified), or exactly determined by one measurement
    predicted: list[float]
    iterations: int
    exact: frozenset[str] = frozenset()  # parameters with no more measurements of their own than unknowns
    # An exactly determined parameter's spread borrowed from the scatter of other rows measuring the same
    # variable: parameter -> (that variable, how many rows the scatter comes from).
    borrowed: dict[str, tuple[str, int]] = field(default_factory=dict)
    # The parameters each row's figure moves with at the fitted values (see `fit`).
    depends: list[frozenset[str]] = field(default_factory=list)


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
    keys = [p.key for p in models.params]
    # A row ties the parameters its figure moves with at the fit: a roofline's Min (or a piecewise) leaves the
    # branches it does not take out of that row's sensitivity, so a compute-bound GEMM row does not tie the GEMM
    # efficiency to the memory efficiency that a memory-bound one depends on instead.
    depends = [frozenset(k for k, d in zip(keys, row) if d != 0.0) for row in J]
    exact: set[str] = set()
    borrowed: dict[str, tuple[str, int]] = {}
    if all(depends):
        # Parameters no row ties together are fitted independently: each block's spread comes from its own
        # rows' residuals, and a block with no more rows than parameters is exactly determined.
        sds = np.zeros(len(keys))
        exact_blocks = []
        # Residual sum of squares, degrees of freedom and rows of the identified blocks whose rows all measure
        # one variable, by that variable.
        scatter: dict[str, list[float]] = {}
        for block in _blocks(keys, depends):
            cols = [keys.index(k) for k in block]
            mine = [i for i, d in enumerate(depends) if d & block]
            dof = len(mine) - len(cols)
            if dof < 1:
                exact.update(block)
                exact_blocks.append((cols, mine))
                continue
            rb, Jb = r[mine], J[np.ix_(mine, cols)]
            cov = np.linalg.pinv(Jb.T @ Jb) * (float(rb @ rb) / dof)
            sds[cols] = np.sqrt(np.clip(np.diag(cov), 0, None))
            _add_scatter(sds, theta, cols, Jb, float(rb @ rb) / dof, rb)
            targets = {models.rows[i].target for i in mine}
            if len(targets) == 1:
                pooled = scatter.setdefault(targets.pop(), [0.0, 0, 0])
                pooled[0] += float(rb @ rb)
                pooled[1] += dof
                pooled[2] += len(mine)
        # One measurement fixes a value but says nothing of how far the next measurement of the same kind
        # lands from the model: a zero spread would claim a shape-independent kernel. Such a parameter takes
        # the scatter that the generation's other rows of the same measured variable show about the fit.
        for cols, mine in exact_blocks:
            targets = {models.rows[i].target for i in mine}
            if len(targets) != 1 or (target := targets.pop()) not in scatter:
                continue
            rss, dof, n = scatter[target]
            _add_scatter(sds, theta, cols, J[np.ix_(mine, cols)], rss / dof)
            borrowed.update({keys[c]: (target, n) for c in cols if sds[c] > 0})
    else:
        dof = max(len(r) - len(theta), 1)
        cov = np.linalg.pinv(J.T @ J) * (cost / dof)
        sds = np.sqrt(np.clip(np.diag(cov), 0, None))
        _add_scatter(sds, theta, list(range(len(keys))), J, cost / dof, r)
    # A parameter stopped by its bound is not identified by the data: it gets no uncertainty.
    at_bound = {k for k, t, a, b in zip(keys, theta, lo, hi) if min(t - a, b - t) <= 1e-9 * max(abs(b), 1.0)}
    return Fit(dict(zip(keys, map(float, theta))),
               {k: (None if k in at_bound or (k in exact and k not in borrowed) else float(sd))
                for k, sd in zip(keys, sds)},
               list(map(float, models.predict(theta))), iterations, frozenset(exact - at_bound),
               {k: b for k, b in borrowed.items() if k not in at_bound}, depends)


def _add_scatter(sds: np.ndarray, theta: np.ndarray, cols: list[int], J: np.ndarray, variance: float,
                 residuals: np.ndarray | None = None) -> None:
    """Make the spread a prediction's, not only the fit's: a new measurement also scatters about the fitted
    model as the fitted rows do (log variance `variance`). The scatter goes to the one parameter whose
    relative change moves the rows' figures alike (median elasticity d log figure / d log parameter within
    5% of 1 or -1: an efficiency that scales a rate or a time), so it is counted once. In a block where no
    parameter does, because rows of different parameters are tied together by rows that depend on several
    (the links of one generation: rings within a node, rings and all-to-alls across nodes), each parameter
    takes the scatter of the rows (`residuals`, log) that it alone scales that way, at least two, so each
    row's scatter is still counted once (a latency takes the scatter of the small messages it alone sets, an
    efficiency that of the large ones); rows between the two regimes leave the parameters their standard
    errors."""
    elasticity = J * theta[cols]
    gap = np.abs(np.abs(np.median(elasticity, axis=0)) - 1)
    if gap.size and gap.min() <= 0.05:
        j = cols[int(np.argmin(gap))]
        sds[j] = float(np.hypot(sds[j], theta[j] * np.sqrt(variance)))
        return
    if residuals is None:
        return
    scales = np.abs(np.abs(elasticity) - 1) <= 0.05
    alone = scales & (scales.sum(axis=1, keepdims=True) == 1)
    for k, j in enumerate(cols):
        own = residuals[alone[:, k]]
        if own.size >= 2:
            sds[j] = float(np.hypot(sds[j], theta[j] * np.sqrt(float(own @ own) / own.size)))


def _borrowed_note(target: str, rows: int) -> str:
    return (f"; exactly determined by its own measurements, with the scatter of the other {rows} {target} rows "
            "about the fit as its spread")


def _blocks(keys: list[str], depends: list[frozenset[str]]) -> list[frozenset[str]]:
    """Groups of parameters linked through rows that depend on more than one of them."""
    groups = [frozenset([k]) for k in keys]
    for d in depends:
        joined = [g for g in groups if g & d]
        groups = [g for g in groups if not g & d] + [frozenset().union(*joined)]
    return sorted(groups, key=lambda g: min(keys.index(k) for k in g))


def data_hash(paths: list[Path]) -> str:
    h = hashlib.sha256()
    for path in sorted(paths):
        h.update(path.name.encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


def observations_hash(items: list[Loaded]) -> str:
    """The fitted evidence by content: every observation's id and locked content hash, in id order."""
    h = hashlib.sha256()
    for item in sorted(items, key=lambda i: i.obs.id):
        h.update(f"{item.obs.id}\0{item.sha256}\n".encode())
    return h.hexdigest()


@dataclass(frozen=True)
class Evidence:
    """What a calibration was fitted to, as its preset records it."""

    scope: str  # what "fitted only to" names in the preset's header
    description: tuple[str, ...]  # the preset description's lines
    source: str
    reference: str
    files: tuple[str, ...]
    digest: str
    observations: tuple[str, ...] = ()
    # The source of each row, in row order, when rows cite more than one: each fitted value then carries the
    # source of most of the rows that depend on it.
    row_references: tuple[str, ...] = ()
    # Observations among those given that a later one supersedes: not fitted to, named in the report.
    skipped: tuple[str, ...] = ()

    def references(self) -> list[str]:
        return sorted({self.reference, *self.row_references})

    def reference_of(self, depends: list[frozenset], key: str) -> str:
        votes = Counter(ref for ref, keys in zip(self.row_references, depends) if key in keys)
        return most_cited(votes) if votes else self.reference


def most_cited(votes: Counter) -> str:
    """The source cited by most rows (the first by name among equals), so the choice is deterministic."""
    return min(votes, key=lambda ref: (-votes[ref], ref))


# The calibration data folder (CSV) that predates observations: kept so an outside folder can be fitted.
DATA_FILES = ("training_iterations.csv", "hardware.yaml")
FOLDER_EVIDENCE = (
    "Efficiency parameters fitted to the calibration data: measured seconds per iteration of",
    "four GPT-style models on A100 (Korthikanti et al. 2022, Table 5), by damped Gauss-Newton",
    "on log(predicted / measured). Roots in one group share one fitted value.")


def calibration_yaml(result, stats: dict, evidence: Evidence, n_rows: int, params: tuple[Parameter, ...],
                     held: tuple[Held, ...], name: str = "calibration",
                     declared: dict[str, tuple[float, str]] | None = None,
                     depends: list[frozenset] | None = None,
                     territory: dict[str, tuple[float, float]] | None = None) -> str:
    """The calibration preset, written by hand so the file is stable byte for byte. `declared`: root ->
    (scale, units) of a root with units, whose fitted value (in base units) is written in its declared unit;
    `depends`: the parameter keys each row depends on, which say whose source a fitted value cites."""
    ref = evidence.reference
    refs = sorted({*evidence.references(), *(h.reference for h in held if h.reference)})
    lines = ["# yaml-language-server: $schema=../../schemas/presets.schema.json",
             f"# Written by `gpustack calibrate`; do not edit by hand. Fitted only to {evidence.scope}.",
             "presets:", f"  - name: {name}",
             "    description: >-",
             *(f"      {line}" for line in evidence.description),
             "    provenance: fitted",
             f"    source: {evidence.source}",
             f"    references: [{', '.join(refs)}]",
             "    fit:",
             "      method: Levenberg-Marquardt on log residuals; sd from the residual variance and the Jacobian, the "
             "rows' scatter about the fit added on each block's scale parameter (a prediction's spread)",
             f"      data: [{', '.join(evidence.files)}]",
             f"      data_sha256: {evidence.digest}",
             *([f"      observations: [{', '.join(evidence.observations)}]"] if evidence.observations else []),
             f"      rows: {n_rows}",
             f"      mape: {stats['mape']:.6g}",
             f"      max_abs_error: {stats['max_abs_error']:.6g}",
             f"      bias: {stats['bias']:.6g}",
             *(["      territory:"] + [f"        {k}: [{lo:.6g}, {hi:.6g}]"
                                         for k, (lo, hi) in sorted(territory.items())] if territory else []),
             "    assignments:"]
    for p in params:
        for root in p.roots:
            scale, units = (declared or {}).get(root, (1.0, "1"))
            sd = result.sds[p.key]
            spread = f", sd: {sd / scale:.3g}" if sd is not None else ""
            unit = "" if units == "1" else f", units: \"{units}\""
            note = f"fitted, group {p.key}" + (
                _borrowed_note(*result.borrowed[p.key]) if p.key in result.borrowed
                else "" if sd is not None
                else "; as many unknowns as measurements of its own: exactly determined, no spread"
                if p.key in result.exact else "; stopped at its bound, not identified")
            lines.append(f"      {root}: {{value: {result.values[p.key] / scale:.6g}{unit}{spread}, "
                         f"reference: {evidence.reference_of(depends or [], p.key)}, note: \"{note}\"}}")
    for h in held:
        lines.append(f"      {h.root}: {{value: {h.value:g}, units: \"{h.units}\", "
                     f"reference: {h.reference or ref}, note: \"held fixed in the fit: {h.reason}\"}}")
    return "\n".join(lines) + "\n"


@dataclass
class Calibration:
    """A fit of the calibration parameters to calibration data, and the preset it makes."""

    data: list[str]
    rows: list[dict]
    parameters: dict[str, dict]
    stats: dict
    data_sha256: str
    observations: list[str]
    iterations: int
    preset_text: str
    preset: str = "calibration"  # the preset's name (a generation's own for component calibrations)
    skipped: list[str] = field(default_factory=list)  # superseded observations given but not fitted to

    def to_dict(self) -> dict:
        return {"preset_name": self.preset, "data": self.data, "parameters": self.parameters, "rows": self.rows,
                **self.stats, "data_sha256": self.data_sha256, "observations": self.observations,
                "iterations": self.iterations, "superseded_skipped": self.skipped}


def folder_rows(data_dir: Path, facts: Facts, presets: set[str]) -> tuple[list[Row], Evidence]:
    """Rows and evidence of a calibration data folder (training_iterations.csv, hardware.yaml)."""
    paths = [data_dir / name for name in DATA_FILES]
    for p in paths:
        if not p.is_file():
            raise InputError(f"calibration data {p} not found", "pass the calibration data folder")
    rows = read_rows(paths[0], facts.measured_runs, presets)
    source = f"gpustack calibrate on shared/data/calibration ({', '.join(DATA_FILES)})"
    return rows, Evidence("the calibration data folder", FOLDER_EVIDENCE, source, "korthikanti2022_recompute", DATA_FILES, data_hash(paths))


def observation_rows(items: list[Loaded], scenarios: ScenarioBuilder, facts: Facts,
                     references: Collection[str]) -> tuple[list[Row], Evidence]:
    """Rows and evidence of calibration observations; evaluation observations are refused by id."""
    if not items:
        raise InputError("no calibration observations given", "pass observation files, or see data/observations")
    require_split(items, "calibration", "calibrate")
    items, superseded = in_force(items)
    benchmarks = [i for i in items if i.obs.component is not None]
    if benchmarks:
        raise InputError(f"{benchmarks[0].where}: `{benchmarks[0].obs.id}` is a component benchmark; fit those "
                         "per hardware generation", "gpustack calibrate --components")
    serving = [i for i in items if not isinstance(i.run, RunSpec)]
    if serving:
        raise InputError(f"{serving[0].where}: observation `{serving[0].obs.id}` is of a serving run; calibrate fits "
                         "the training efficiencies of catalog/bindings/calibration_fit.yaml",
                         "serving component measurements enter through the serving_calibration_* presets")
    check_sources(items, references)
    rows = [observation_row(i, scenarios, facts.measured_runs) for i in items]
    refs = sorted({i.obs.source.reference for i in items})
    if len(refs) != 1:
        # Each fitted value carries one reference key in the preset (Quantity.reference).
        raise InputError(f"calibration observations cite {len(refs)} sources ({', '.join(refs)}); a fit takes "
                         "observations of one source at a time")
    files = tuple(sorted({i.file.name for i in items}))
    panels = sorted({i.obs.panel for i in items})
    description = ("Efficiency parameters fitted to the calibration observations listed under fit.observations",
                   f"(panel {', '.join(panels)}), by damped Gauss-Newton on log(predicted / measured). Roots in",
                   "one group share one fitted value.")
    source = f"gpustack calibrate on data/observations ({', '.join(files)})"
    return rows, Evidence("calibration observations", description, source, refs[0], files, observations_hash(items),
                          tuple(i.obs.id for i in items), skipped=tuple(i.obs.id for i in superseded))


def _calibration(models: RowModels, evidence: Evidence, held: tuple[Held, ...], name: str,
                 territory: dict[str, tuple[float, float]] | None = None) -> Calibration:
    result = fit(models)
    rows = models.rows
    measured = [r.measured for r in rows]
    stats = errors(result.predicted, measured)
    declared = {r: (v.scale, v.units) for p in models.params for r in p.roots
                for v in [models.resolver.variable(r)] if v.units != "1"}
    text = calibration_yaml(result, stats, evidence, len(rows), models.params, held, name, declared, result.depends,
                            territory)
    table = [{"id": r.id, "run": r.label, "measured": m, "predicted": p, "error": (p - m) / m,
              "low": r.low, "high": r.high, "within_uncertainty": r.low <= p <= r.high}
             for r, m, p in zip(rows, measured, result.predicted)]
    parameters = {k: {"value": v, "sd": result.sds[k], "exactly_determined": k in result.exact,
                      "spread_from": result.borrowed[k][0] if k in result.borrowed else None}
                  for k, v in result.values.items()}
    return Calibration(list(evidence.files), table, parameters, stats, evidence.digest, list(evidence.observations),
                       result.iterations, text, name, list(evidence.skipped))


def calibrate(resolver: Resolver, scenarios: ScenarioBuilder, facts: Facts, rows: list[Row],
              evidence: Evidence) -> Calibration:
    models = RowModels(resolver, scenarios, facts.run_fields, rows, facts.parameters, facts.held)
    return _calibration(models, evidence, facts.held, "calibration")


def component_calibrations(resolver: Resolver, scenarios: ScenarioBuilder, facts: Facts, items: list[Loaded],
                           references: Collection[str]) -> list[Calibration]:
    """One calibration preset per hardware generation, each fitted to that generation's component
    benchmarks alone (kernel and memory measurements; end-to-end runs are never among them)."""
    require_split(items, "calibration", "calibrate")
    items, superseded = in_force([i for i in items if i.obs.component is not None])
    if not items:
        raise InputError("no component benchmarks among the calibration observations",
                         "observations with a `component` block (docs/evaluation.md)")
    check_sources(items, references)
    out = []
    for key in sorted({i.obs.component.generation for i in items}):
        mine = [i for i in items if i.obs.component.generation == key]
        gen = facts.generations.get(key)
        if gen is None:
            raise InputError(f"{mine[0].where}: component.generation: no generation `{key}` in "
                             "catalog/bindings/calibration_fit.yaml", f"one of: {', '.join(sorted(facts.generations))}")
        refs = Counter(i.obs.source.reference for i in mine)
        rows = [observation_row(i, scenarios, facts.measured_runs) for i in mine]
        files = tuple(sorted({i.file.name for i in mine}))
        description = (f"Kernel and memory efficiencies of hardware generation {key} ({', '.join(gen.gpu_presets)}),",
                       "fitted to the component benchmarks listed under fit.observations, by damped Gauss-Newton",
                       "on log(predicted / measured); each parameter on its own. Never fitted to end-to-end runs.")
        evidence = Evidence(f"component benchmarks of generation {key}", description,
                            f"gpustack calibrate --components on data/observations ({', '.join(files)})",
                            most_cited(refs), files, observations_hash(mine),
                            tuple(i.obs.id for i in mine), tuple(i.obs.source.reference for i in mine),
                            tuple(i.obs.id for i in superseded if i.obs.component.generation == key))
        held = {h.root for h in gen.held}
        params = tuple(p for p in facts.component_parameters if not held & set(p.roots))
        models = RowModels(resolver, scenarios, facts.run_fields, rows, params, gen.held, identified_only=True)
        if not models.params:
            raise InputError(f"generation {key}: its benchmarks depend on none of the component parameters",
                             "catalog/bindings/calibration_fit.yaml, components.parameters")
        out.append(_calibration(models, evidence, gen.held, gen.preset))
    return out


def territory(rows: list[Row], scenarios: ScenarioBuilder) -> dict[str, tuple[float, float]]:
    """Each assigned root's lowest and highest value over the rows, in its declared units."""
    seen: dict[str, list[float]] = {}
    for row in rows:
        for name, value in row.component.assign.items():
            seen.setdefault(name, []).append(scenarios.quantity(name, value, row.where).value
                                             / scenarios.variable(name, row.where).scale)
    if "learning.fault.rollback_rate" in seen and "learning.fault.steps_lost_per_rollback" in seen:
        # What the model takes from the two: the share of steps lost.
        seen["learning.fault.lost_share"] = [r * m for r, m in zip(seen["learning.fault.rollback_rate"],
                                                                  seen["learning.fault.steps_lost_per_rollback"])]
    return {k: (min(v), max(v)) for k, v in seen.items()}


def learning_calibration(resolver: Resolver, scenarios: ScenarioBuilder, facts: Facts, items: list[Loaded],
                         references: Collection[str]) -> Calibration:
    """The learning roots fitted to the local learning workload's calibration measurements (each condition's
    mean over seeds); inadmissible rows are never fitted to, evaluation rows are refused by id."""
    from ..engine.observation import admissible

    require_split(items, "calibration", "calibrate")
    items, superseded = in_force([i for i in items if getattr(i.obs, "learning", None) is not None])
    items, refused = admissible(items)
    if not items:
        raise InputError("no admissible local learning measurements among the calibration observations",
                         "run `gpustack learn` (docs/learning.md); data/observations/local_learning.yaml")
    check_sources(items, references)
    spec = facts.learning_fit
    rows = [observation_row(i, scenarios, facts.measured_runs) for i in items]
    refs = Counter(i.obs.source.reference for i in items)
    files = tuple(sorted({i.file.name for i in items}))
    description = ("Learning roots of catalog/learning fitted to the local learning workload's calibration",
                   "measurements listed under fit.observations (a small model on this machine's CPUs; no",
                   "frontier-scale claim), by damped Gauss-Newton on log(predicted / measured), each parameter",
                   "on its own; fit.territory is the range of conditions seen, outside which estimates abstain.")
    evidence = Evidence("local learning measurements", description,
                        f"gpustack calibrate --learning on data/observations ({', '.join(files)})", most_cited(refs),
                        files, observations_hash(items), tuple(i.obs.id for i in items),
                        tuple(i.obs.source.reference for i in items),
                        tuple(i.obs.id for i in superseded) + tuple(i.obs.id for i in refused))
    models = RowModels(resolver, scenarios, facts.run_fields, rows, spec.parameters, spec.held, identified_only=True)
    return _calibration(models, evidence, spec.held, spec.preset, territory(rows, scenarios))
