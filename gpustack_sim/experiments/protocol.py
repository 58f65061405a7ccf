"""Preregistered protocols: the YAML model (strict, extra keys refused; JSON Schema in
schemas/protocol.schema.json), loading with line numbers, the rules a schema cannot state, and the
canonical JSON a protocol is hashed as.

A protocol file is untrusted input: it is read with the safe loader of `gpustack_compiler.base.yaml_lines`
(anchors refused), never evaluated, and any error is one `InputError` line `file:line: field: message`."""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from gpustack_compiler.base.errors import InputError
from gpustack_compiler.base.suggest import did_you_mean

Quantity = str | float
Stage = Literal["virtual", "real"]
STAGES: tuple[str, ...] = ("virtual", "real")  # in order: a virtual screen can reject, never validate
ID_PATTERN = r"^E[0-9]{3}$"
NAME_PATTERN = r"^[a-z][a-z0-9_]*$"
KEY_PATTERN = r"^[A-Za-z][A-Za-z0-9_.-]*$"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, strict=True)


class Arm(_Strict):
    id: str = Field(pattern=NAME_PATTERN, description="Arm id, used by the panel (snake_case).")
    description: str = Field(min_length=1, description="What this arm does.")


class Metric(_Strict):
    name: str = Field(pattern=NAME_PATTERN, description="Metric name (snake_case), used by falsifiers.")
    unit: str = Field(min_length=1, description="Unit over the catalog's units (`1` dimensionless, `s`, `MWh`).")
    description: str = Field(min_length=1, description="What is measured, on which arms, and how.")
    primary: bool = Field(False, description="A primary metric answers the question; at least one is required.")
    estimator: Literal["mean", "proportion"] = Field(
        "mean", description="mean: Student's t interval over replications; proportion: successes over trials, "
        "exact Clopper–Pearson interval.")
    interval: float = Field(0.9, gt=0, lt=1, description="Level of the two-sided interval; each bound alone is a "
                            "one-sided bound at (1 + interval) / 2 (0.9: 95% one-sided bounds).")
    earliest_stage: Stage = Field("virtual", description="First stage at which the metric can be measured; its "
                                  "falsifiers are deferred before it.")
    planned_trials: int | None = Field(None, ge=1, description="For a proportion whose trials are events rather "
                                       "than replications: the planned number of trials (the power audit uses it).")


class Falsifier(_Strict):
    id: str = Field(pattern=KEY_PATTERN, description="Falsifier id, e.g. F1.")
    metric: str = Field(description="Name of a defined metric.")
    op: Literal["lt", "le", "gt", "ge", "between"] = Field(description="The comparison that must hold for the "
                                                           "hypothesis to survive.")
    threshold: Quantity = Field(description="Threshold with a unit ('10 s', '20 percent') or a number in the "
                                "metric's unit; the lower end for `between`.")
    upper: Quantity | None = Field(None, description="Upper end, for `between` only.")
    bound: Literal["lower", "point", "upper"] = Field(description="Which value of the metric's interval is "
                                                      "compared: its lower bound, point estimate or upper bound.")
    description: str | None = Field(None, description="What failing this falsifier would mean.")


class IndependentVariable(_Strict):
    name: str = Field(pattern=NAME_PATTERN)
    description: str = Field(min_length=1)
    values: list[str | int | float | bool] = Field(default_factory=list, description="Levels or the fixed value.")


class HeldOutDimension(_Strict):
    dimension: str = Field(pattern=NAME_PATTERN)
    description: str = Field(min_length=1, description="What is held out, and why the model never sees it.")


class RealValidation(_Strict):
    id: str = Field(pattern=KEY_PATTERN)
    description: str = Field(min_length=1)
    observable: str = Field(min_length=1, description="What must be measured on real systems.")
    minimum_samples: int = Field(ge=1)


class SeedPolicy(_Strict):
    default_seed: int = Field(0, ge=0, description="Seed when the command gives none.")
    common_random_numbers: bool = Field(True, description="Every arm of replication i replays the same failure "
                                        "trace (the same seed).")
    description: str = Field(min_length=1)


class EvidenceRequirement(_Strict):
    id: str = Field(pattern=KEY_PATTERN)
    kind: Literal["virtual_replay", "model_capability", "measurement", "held_out_evaluation", "ablation",
                  "sensitivity"]
    description: str = Field(min_length=1)
    earliest_stage: Stage = Field(description="Before this stage the requirement is deferred, not missing.")
    acceptance: Literal["resolved", "falsifiers_pass", "min_samples"] = Field(
        description="resolved: every required metric has a value and interval; falsifiers_pass: every falsifier "
        "on the required metrics passes; min_samples: each required metric rests on at least min_samples samples "
        "(fewer is missing evidence, not a failure).")
    min_samples: int | None = Field(None, ge=1, description="For acceptance min_samples.")
    mandatory: bool = Field(description="A failed mandatory requirement fails the screen.")
    metrics: list[str] = Field(min_length=1, description="Metrics the requirement needs.")


class Scenario(_Strict):
    run: str | None = Field(None, description="Run file, relative to the repository root.")
    sites: str | None = Field(None, description="Sites file, relative to the repository root.")
    parameters: dict[str, str | int | float | bool] = Field(default_factory=dict,
                                                   description="Panel parameters (the arms' settings).")


class ProtocolFile(_Strict):
    id: str = Field(pattern=ID_PATTERN, description="Protocol id, E followed by three digits.")
    version: int = Field(ge=1, description="A change to a frozen protocol is a new version, never an edit.")
    title: str = Field(min_length=1)
    question: str = Field(min_length=1)
    hypothesis: str = Field(min_length=1)
    revision_reason: str | None = Field(None, description="Why this version differs from the previous one "
                                        "(required from version 2).")
    baselines: list[Arm] = Field(min_length=1, description="Comparator arms.")
    candidates: list[Arm] = Field(min_length=1, description="Arms under test.")
    metrics: list[Metric] = Field(min_length=1)
    falsifiers: list[Falsifier] = Field(min_length=1)
    independent_variables: list[IndependentVariable] = Field(default_factory=list)
    held_out_dimensions: list[HeldOutDimension] = Field(default_factory=list)
    real_validation: list[RealValidation] = Field(default_factory=list,
                                                  description="Measurements a real-stage run needs.")
    seed_policy: SeedPolicy
    planned_sample_size: int = Field(ge=1, description="Replications per arm.")
    evidence_requirements: list[EvidenceRequirement] = Field(min_length=1)
    scenario: Scenario = Field(default_factory=Scenario)
    notes: list[str] = Field(default_factory=list)


@dataclass(frozen=True)
class Threshold:
    """A falsifier's thresholds in its metric's unit."""

    value: float
    upper: float | None


@dataclass(frozen=True)
class Protocol:
    """A checked protocol: the model, its canonical data (what is hashed), where it came from, and the
    thresholds converted to each metric's unit (None when checked without a unit system)."""

    spec: ProtocolFile
    data: dict
    path: str
    thresholds: dict[str, Threshold] | None

    @property
    def key(self) -> str:
        return f"{self.spec.id}@{self.spec.version}"

    @property
    def sha256(self) -> str:
        return sha256_of(self.data)

    def metric(self, name: str) -> Metric:
        return next(m for m in self.spec.metrics if m.name == name)

    @property
    def arms(self) -> list[str]:
        return [a.id for a in self.spec.baselines] + [a.id for a in self.spec.candidates]


def canonical_json(data) -> str:
    """Sorted keys, no whitespace, no NaN: the same data always gives the same bytes."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def sha256_of(data) -> str:
    return hashlib.sha256(canonical_json(data).encode("utf-8")).hexdigest()


def plain(data):
    """The YAML data without line bookkeeping (LinedDict / LinedList become dict / list)."""
    if isinstance(data, dict):
        return {str(k): plain(v) for k, v in data.items()}
    if isinstance(data, list):
        return [plain(v) for v in data]
    return data


def load_protocol(path: Path, units=None, shown: str | None = None, root: Path | None = None) -> Protocol:
    """Read and check one protocol file; `units` (the catalog's UnitSystem) enables the unit checks, `root`
    (the repository root) the check that scenario files exist. `shown` is the path printed in errors."""
    from gpustack_compiler.base.documents import field_path, read_mapping, validate
    from gpustack_compiler.base.yaml_lines import line_at

    where = shown or str(path)
    data = read_mapping(path, "protocol", where)
    spec = validate(ProtocolFile, data, where)
    try:
        json_data = plain(data)
        canonical_json(json_data)
    except ValueError:
        raise InputError(f"{where}:1: a protocol may not hold NaN or infinite numbers") from None

    def fail(loc: tuple, message: str, hint: str | None = None) -> InputError:
        return InputError(f"{where}:{line_at(data, loc)}: {field_path(loc)}: {message}", hint)

    thresholds = _check(spec, fail, units)
    if root is not None:
        for key in ("run", "sites"):
            rel = getattr(spec.scenario, key)
            if rel is not None and not (root / rel).is_file():
                raise fail(("scenario", key), f"{rel} not found in the repository")
    return Protocol(spec, json_data, where, thresholds)


def _check(spec: ProtocolFile, fail, units) -> dict[str, Threshold] | None:
    """The rules a JSON Schema cannot state. Raises the first violation as a one-line InputError."""
    _unique(spec.metrics, "name", "metrics", fail)
    _unique(spec.falsifiers, "id", "falsifiers", fail)
    _unique(spec.evidence_requirements, "id", "evidence_requirements", fail)
    _unique(spec.real_validation, "id", "real_validation", fail)
    _unique(spec.independent_variables, "name", "independent_variables", fail)
    arms = [("baselines", i, a.id) for i, a in enumerate(spec.baselines)]
    arms += [("candidates", i, a.id) for i, a in enumerate(spec.candidates)]
    seen: set[str] = set()
    for group, i, arm in arms:
        if arm in seen:
            raise fail((group, i, "id"), f"arm {arm!r} is defined twice")
        seen.add(arm)
    if spec.version > 1 and not spec.revision_reason:
        raise fail(("version",), f"version {spec.version} needs a revision_reason (what changed and why)")
    metrics = {m.name: m for m in spec.metrics}
    if not any(m.primary for m in spec.metrics):
        raise fail(("metrics",), "no primary metric (mark at least one `primary: true`)")
    for i, f in enumerate(spec.falsifiers):
        if f.metric not in metrics:
            raise fail(("falsifiers", i, "metric"), f"unknown metric {f.metric!r}", did_you_mean(f.metric, metrics))
        if f.op == "between" and f.upper is None:
            raise fail(("falsifiers", i, "op"), "op between needs an upper end (`upper`)")
        if f.op != "between" and f.upper is not None:
            raise fail(("falsifiers", i, "upper"), f"only op between takes an upper end (op is {f.op})")
    for i, e in enumerate(spec.evidence_requirements):
        for j, name in enumerate(e.metrics):
            if name not in metrics:
                raise fail(("evidence_requirements", i, "metrics", j), f"unknown metric {name!r}",
                           did_you_mean(name, metrics))
        if (e.acceptance == "min_samples") != (e.min_samples is not None):
            raise fail(("evidence_requirements", i, "min_samples"),
                       "min_samples goes with acceptance min_samples, and only with it")
    covered = {f.metric for f in spec.falsifiers}
    covered |= {n for e in spec.evidence_requirements if e.mandatory for n in e.metrics}
    for i, m in enumerate(spec.metrics):
        if m.primary and m.name not in covered:
            raise fail(("metrics", i, "name"), f"primary metric {m.name!r} is covered by no falsifier and no "
                       "mandatory evidence requirement")
        if m.planned_trials is not None and m.estimator != "proportion":
            raise fail(("metrics", i, "planned_trials"), "planned_trials is for proportion metrics")
    for key, value in (("run", spec.scenario.run), ("sites", spec.scenario.sites)):
        if value is not None:
            p = PurePosixPath(value)
            if p.is_absolute() or ".." in p.parts or "\\" in value or not value.strip():
                raise fail(("scenario", key), f"{value!r}: give a path inside the repository, relative to its root")
    if units is None:
        return None
    return _thresholds(spec, metrics, fail, units)


def _unique(items, attr: str, group: str, fail) -> None:
    seen: set[str] = set()
    for i, item in enumerate(items):
        key = getattr(item, attr)
        if key in seen:
            raise fail((group, i, attr), f"{key!r} is defined twice")
        seen.add(key)


def _thresholds(spec: ProtocolFile, metrics: dict[str, Metric], fail, units) -> dict[str, Threshold]:
    from gpustack_compiler.language.models import parse_quantity
    from gpustack_compiler.language.units import UnitError

    for i, m in enumerate(spec.metrics):
        try:
            units.parse(m.unit)
        except UnitError as exc:
            raise fail(("metrics", i, "unit"), str(exc)) from None

    def convert(value: Quantity, metric: Metric, loc: tuple) -> float:
        want = units.parse(metric.unit)
        try:
            q = parse_quantity(value, metric.unit)
            got = units.parse(q.units)
        except (ValueError, UnitError) as exc:
            raise fail(loc, str(exc)) from None
        if got.dim != want.dim:
            raise fail(loc, f"{value!r} is {units.format_dim(got.dim)}, but metric {metric.name!r} is in "
                       f"{metric.unit!r} ({units.format_dim(want.dim)})")
        out = q.value * got.scale / want.scale
        if not math.isfinite(out):
            raise fail(loc, f"{value!r} is not a finite number")
        return out

    out = {}
    for i, f in enumerate(spec.falsifiers):
        metric = metrics[f.metric]
        low = convert(f.threshold, metric, ("falsifiers", i, "threshold"))
        high = None if f.upper is None else convert(f.upper, metric, ("falsifiers", i, "upper"))
        if high is not None and high < low:
            raise fail(("falsifiers", i, "upper"), f"upper {f.upper!r} is below threshold {f.threshold!r}")
        out[f.id] = Threshold(low, high)
    return out


def _register_schema() -> None:
    # The compiler owns `gpustack schema` but may not import the engine: the engine registers its file.
    from gpustack_compiler.build.schema import SCHEMA_FILES

    SCHEMA_FILES.setdefault("protocol.schema.json", ProtocolFile)


_register_schema()
