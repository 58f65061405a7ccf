"""Typed views of the catalog's bindings (catalog/bindings/*.yaml, carried in the manifest's `bindings`):
what the analyses report, rank by, fit and hold, how measured rows become runs, what the datacenter's
replays read and what the observatory draws. The analyses, the datacenter, the observatory and the command
line read catalog names only from here, never from their own code.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from functools import cached_property

from gpustack_compiler.base.errors import CatalogError
from gpustack_compiler.manifest.records import Tables

from .bindings import RunFields, check_field


@dataclass(frozen=True)
class Objective:
    variable: str
    best: str  # max | min


@dataclass(frozen=True)
class Memory:
    per_gpu: str
    capacity: str
    parts: tuple[str, ...]
    buffers: str  # the part with no source: without it the fit is stated as headroom


@dataclass(frozen=True)
class Requirement:
    """A condition a serving layout must meet: `variable` `kind` (at_most | at_least | below) `limit`
    (a variable's name or a number in the variable's units)."""

    label: str
    variable: str
    kind: str
    limit: str | float


@dataclass(frozen=True)
class Serving:
    """The serving bindings: run-file fields, the estimate's figures, the sweep's requirements and objectives."""

    fields: RunFields
    figures: list[tuple[str, str]]
    requirements: tuple[Requirement, ...]
    objectives: dict[str, Objective]


@dataclass(frozen=True)
class Breakdown:
    """A figure drawn as its parts: `split` splits each part once more; `groups`, part variable -> group."""

    variable: str
    split: bool
    groups: dict[str, str]


@dataclass(frozen=True)
class Breakdowns:
    step: Breakdown  # drawn as a waterfall
    cost: Breakdown  # drawn as a stacked bar


@dataclass(frozen=True)
class FailureClassSpec:
    """A kind of part whose failures interrupt a training job: `rate` per part, `count` parts per `per`
    (None: one)."""

    name: str
    rate: str
    per: str
    count: str | None = None


@dataclass(frozen=True)
class AggregateClass:
    """A rate that replaces those of its `parts` (failure class names) when a preset assigns it."""

    name: str
    rate: str
    per: str
    parts: tuple[str, ...]


@dataclass(frozen=True)
class TrainingReplay:
    """The training replay's bindings (catalog/bindings/training_replay.yaml)."""

    parameters: tuple[tuple[str, str, bool], ...]  # (field, catalog variable, optional)
    params: str  # parameters exchanged at a cross-site synchronisation
    bytes_per_param: str
    job_failure_rate: str
    fleet_variant: str  # when job_failure_rate takes this variant, the fleet class alone
    fleet_class: FailureClassSpec
    failure_classes: tuple[FailureClassSpec, ...]
    aggregate_classes: tuple[AggregateClass, ...]

    @property
    def variables(self) -> list[str]:
        """Every variable the replay may read, sorted."""
        return sorted({*(v for _, v, _ in self.parameters), self.params, self.bytes_per_param, self.job_failure_rate,
                       self.fleet_class.rate, *(v for c in self.failure_classes for v in (c.rate, c.count) if v),
                       *(a.rate for a in self.aggregate_classes)})


@dataclass(frozen=True)
class Parameter:
    """One fitted value assigned to every root of its group (roots the data cannot tell apart)."""

    key: str
    roots: tuple[str, ...]
    initial: float
    low: float
    high: float


@dataclass(frozen=True)
class Held:
    """A root the data cannot separate from a fitted parameter: held at a stated value during the fit,
    and written into the calibration preset with the reason."""

    root: str
    value: float
    units: str
    reason: str
    reference: str | None = None  # the first source the binding gives for the value, if any


@dataclass(frozen=True)
class Generation:
    """A hardware generation: the GPU presets it covers and the calibration preset its components make."""

    key: str
    gpu_presets: tuple[str, ...]
    preset: str
    applied: bool = True  # whether validate applies the preset to runs of this generation
    held: tuple[Held, ...] = ()  # roots its measurements cannot identify, held at stated values


@dataclass(frozen=True)
class LearningFit:
    """The learning roots fitted to the local learning workload's measurements, and those held at a prior."""

    target: str
    preset: str
    parameters: tuple[Parameter, ...]
    held: tuple[Held, ...]


@dataclass(frozen=True)
class MeasuredRuns:
    """How a CSV row of measured iterations becomes a run."""

    columns: dict[str, str]  # column -> run-file field
    hardware: dict[str, list[str]]  # key -> presets
    precision: dict[str, str]  # key -> preset
    measures: dict[str, dict]  # column -> {variable} or {by_convention: {convention: variable}}, in order
    convention_column: str | None
    fields: dict[str, object]  # run-file field -> value every row takes
    presets: list[str]
    assign: dict[str, object]
    flop_conventions: dict[str, str]  # variable -> how it counts FLOPs (model, hardware, megatron_recompute)


def _held(entries: list[dict]) -> tuple[Held, ...]:
    return tuple(Held(h["variable"], h["value"], h["units"], h["reason"], (h.get("references") or [None])[0])
                 for h in entries)


class Facts:
    """The bindings of a compiled catalog, each read (and its run-file fields checked) on first use."""

    def __init__(self, tables: Tables):
        self._bindings = tables.bindings

    def _table(self, kind: str) -> dict:
        table = self._bindings.get(kind)
        if table is None:
            raise CatalogError(f"the catalog has no {kind} bindings", f"add catalog/bindings/{kind}.yaml and recompile")
        return table

    @cached_property
    def run_fields(self) -> RunFields:
        return RunFields(self._table("run_fields"), presets=self.run_presets)

    def run_presets(self, run, known: Collection[str]) -> list[str]:
        """A run's presets in order, with the component calibration of each hardware generation whose GPU
        presets it names right after the end-to-end calibration preset when it names that one too
        (catalog/bindings/calibration_fit.yaml): estimate, sweep and validate then agree for the same run.
        `known`: the catalog's presets (a generation's is there once `calibrate --components` wrote it)."""
        presets = run.presets_in_order()
        fit = self._bindings.get("calibration_fit")
        if fit is None or fit["preset"] not in presets:
            return presets
        named = set(presets)
        extra = [g.preset for g in self.generations.values()
                 if g.applied and named & set(g.gpu_presets) and g.preset in known and g.preset not in named]
        at = presets.index(fit["preset"]) + 1
        return [*presets[:at], *extra, *presets[at:]]

    @cached_property
    def figures(self) -> list[tuple[str, str]]:
        """(label, variable) of the estimate's figures, in order."""
        return [(f["label"], f["variable"]) for f in self._table("figures")["figures"]]

    @cached_property
    def required_figures(self) -> frozenset[str]:
        """Variables of the figures an estimate cannot do without."""
        return frozenset(f["variable"] for f in self._table("figures")["figures"] if f.get("required"))

    @cached_property
    def memory(self) -> Memory:
        m = self._table("figures")["memory"]
        return Memory(m["per_gpu"], m["capacity"], tuple(m["parts"]), m["buffers"])

    @cached_property
    def objectives(self) -> dict[str, Objective]:
        return {k: Objective(o["variable"], o["best"]) for k, o in self._table("figures")["objectives"].items()}

    @cached_property
    def serving(self) -> Serving:
        from .serve_run import ServeRunSpec

        t = self._table("serve_figures")
        requirements = []
        for r in t.get("requirements", []):
            kind = next(k for k in ("at_most", "at_least", "below") if k in r)
            requirements.append(Requirement(r["label"], r["variable"], kind, r[kind]))
        return Serving(RunFields(self._table("serve_fields"), ServeRunSpec, self.run_presets),
                       [(f["label"], f["variable"]) for f in t["figures"]], tuple(requirements),
                       {k: Objective(o["variable"], o["best"]) for k, o in t["objectives"].items()})

    @cached_property
    def serve_replay(self) -> tuple[tuple[str, str, bool], ...]:
        """The serving replay's parameters: (field, catalog variable, optional)."""
        return tuple((p["field"], p["variable"], bool(p.get("optional", False)))
                     for p in self._table("serve_replay")["parameters"])

    @cached_property
    def training_replay(self) -> TrainingReplay:
        t = self._table("training_replay")

        def spec(c: dict) -> FailureClassSpec:
            return FailureClassSpec(c["name"], c["rate"], c["per"], c.get("count"))

        parameters = tuple((p["field"], p["variable"], bool(p.get("optional", False))) for p in t["parameters"])
        return TrainingReplay(parameters,
                              t["model_sync"]["params"], t["model_sync"]["bytes_per_param"],
                              t["job_failure_rate"]["variable"], t["job_failure_rate"]["fleet_variant"],
                              spec(t["fleet_class"]), tuple(spec(c) for c in t["failure_classes"]),
                              tuple(AggregateClass(a["name"], a["rate"], a["per"], tuple(a["parts"]))
                                    for a in t.get("aggregate_classes", [])))

    @cached_property
    def breakdowns(self) -> Breakdowns:
        t = self._table("figures").get("breakdowns")
        if t is None:
            raise CatalogError("catalog/bindings/figures.yaml has no `breakdowns` section",
                               "add one naming the step-time and cost figures to draw")

        def one(b: dict) -> Breakdown:
            return Breakdown(b["variable"], bool(b.get("split", False)),
                             {g["variable"]: g["group"] for g in b.get("groups", [])})

        return Breakdowns(one(t["step"]), one(t["cost"]))

    def fields_for(self, run) -> RunFields:
        """The field bindings of a run: serving ones for a serving run file, else the training ones."""
        from .serve_run import ServeRunSpec

        return self.serving.fields if isinstance(run, ServeRunSpec) else self.run_fields

    @cached_property
    def parameters(self) -> tuple[Parameter, ...]:
        return tuple(Parameter(p["key"], tuple(p["roots"]), p["initial"], p["low"], p["high"])
                     for p in self._table("calibration_fit")["parameters"])

    @cached_property
    def component_parameters(self) -> tuple[Parameter, ...]:
        comp = self._table("calibration_fit").get("components") or {}
        return tuple(Parameter(p["key"], tuple(p["roots"]), p["initial"], p["low"], p["high"])
                     for p in comp.get("parameters", []))

    @cached_property
    def generations(self) -> dict[str, Generation]:
        comp = self._table("calibration_fit").get("components") or {}
        return {g["key"]: Generation(g["key"], tuple(g["gpu_presets"]), g["preset"], g.get("applied", True),
                                     _held(g.get("held", [])))
                for g in comp.get("generations", [])}

    @cached_property
    def learning_fit(self) -> LearningFit:
        t = self._table("calibration_fit").get("learning")
        if not t:
            raise CatalogError("catalog/bindings/calibration_fit.yaml has no `learning` section",
                               "add one naming the learning roots to fit")
        return LearningFit(t["target"], t["preset"],
                           tuple(Parameter(p["key"], tuple(p["roots"]), p["initial"], p["low"], p["high"])
                                 for p in t["parameters"]), _held(t.get("held", [])))

    @cached_property
    def held(self) -> tuple[Held, ...]:
        return _held(self._table("calibration_fit")["held"])

    @cached_property
    def measured_runs(self) -> MeasuredRuns:
        t = self._table("measured_runs")
        d = t["defaults"]
        for entry in [*t["columns"], *d["fields"]]:
            check_field(entry["field"], t["file"], entry["line"])
        return MeasuredRuns({c["column"]: c["field"] for c in t["columns"]},
                            {k: h["presets"] for k, h in t["hardware"].items()},
                            {k: p["preset"] for k, p in t["precision"].items()},
                            {ms["column"]: ms for ms in t["measures"]}, t.get("convention_column"),
                            {f["field"]: f["value"] for f in d["fields"]}, [p["preset"] for p in d["presets"]],
                            {a["variable"]: a["value"] for a in d["assignments"]},
                            {v: k for k, fc in (t.get("flop_conventions") or {}).items() for v in fc["variables"]})
