"""What the catalog YAML says: the raw layer, strict (`extra="forbid"`), one model per file kind.

Resolution into the graph and the manifest is a later step (see `catalog.py`); these models only
describe syntax, and the committed JSON Schema in `schemas/` is generated from them.
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Literal, Union, get_args

from pydantic import BaseModel, ConfigDict, Field, model_validator

NAME_PATTERN = r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+$"
KEY_PATTERN = r"^[a-z][a-z0-9_]*$"

Name = Annotated[str, Field(description="Full dotted name, lower case: `system_prefix.part.part`.")]
Expression = Annotated[str, Field(
    description="An expression over full dotted names, parsed without eval into an allowlist of "
                "operators and functions (exp, log, sqrt, Min, Max, floor, ceiling, Abs, trig, ...). "
                "`unit('FLOP/token')` is a literal carrying a unit.")]
RefKeys = Annotated[list[str], Field(description="Keys of `catalog/references.yaml`.")]

Assumption = Literal["real", "positive", "nonnegative", "negative", "nonpositive", "nonzero", "integer"]
BoundaryCategory = Literal["scenario_boundary", "primitive_physics", "needs_calibration"]
ReferenceKind = Literal["paper", "textbook", "standard", "datasheet", "whitepaper", "manual",
                        "dataset", "report", "software", "note"]
LITERATURE_KINDS = frozenset({"paper", "textbook", "standard"})


class Strict(BaseModel):
    # defer_build: a model's validator is built when first used, so the engine, which validates none of
    # the catalog files, does not pay for building them all at import
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, frozen=True, defer_build=True)


class Bounds(Strict):
    """Inclusive bounds in the variable's declared units."""

    min: float | None = None
    max: float | None = None


class RootSpec(Strict):
    """Declared on a variable that no value-defining relation defines (a root input)."""

    category: BoundaryCategory
    family: Annotated[str, Field(pattern=KEY_PATTERN, description="Groups roots for root-debt tables.")]
    note: str | None = None


class Variable(Strict):
    name: Name
    units: Annotated[str, Field(description="Unit string from `catalog/units.yaml`; `1` for dimensionless.")]
    description: Annotated[str, Field(min_length=1)]
    symbol: Annotated[str | None, Field(description="LaTeX symbol for display.")] = None
    quantity: Annotated[str | None, Field(description="Quantity kind (energy, torque, ...), apart from units.")] = None
    assumptions: list[Assumption] = Field(default_factory=list)
    bounds: Bounds | None = None
    references: RefKeys = Field(default_factory=list)
    root: RootSpec | None = None


class _RelationBase(Strict):
    name: Name
    description: Annotated[str, Field(min_length=1)]
    references: RefKeys = Field(default_factory=list)
    notes: str | None = None


class Identity(_RelationBase):
    """`defines = expression`, the only definition of the variable."""

    kind: Literal["identity"]
    defines: Name
    expression: Expression


class Variant(_RelationBase):
    """One of several alternative definitions, chosen by key (e.g. `datasheet`, `derived`)."""

    kind: Literal["variant"]
    defines: Name
    variant: Annotated[str, Field(pattern=KEY_PATTERN)]
    expression: Expression
    leaves_out: Annotated[str | None, Field(min_length=1, description=(
        "What this definition does not count (an accounting boundary, such as costs or loads without a "
        "sourced figure); every estimate whose figures use it says so."))] = None


class Approximation(_RelationBase):
    """A definition valid only where `validity` (a condition) holds."""

    kind: Literal["approximation"]
    defines: Name
    expression: Expression
    validity: Annotated[str, Field(description="Condition such as `a < 0.1 * b`; `and`/`or` allowed.")]


class Constraint(_RelationBase):
    """An inequality that must hold; it constrains every variable it names and defines none."""

    kind: Literal["constraint"]
    expression: Annotated[str, Field(description="An inequality: `lhs <= rhs`, `a >= 0.25`, ...")]


class Piece(Strict):
    when: Annotated[str | None, Field(description="Condition; omit on the last piece (otherwise).")] = None
    expression: Expression


class Piecewise(_RelationBase):
    """The first piece whose condition holds; the last piece may omit `when`."""

    kind: Literal["piecewise"]
    defines: Name
    pieces: Annotated[list[Piece], Field(min_length=1)]


class Iterative(_RelationBase):
    """A fixed point `defines = expression(defines, ...)`: feedback without a graph cycle."""

    kind: Literal["iterative"]
    defines: Name
    expression: Expression
    initial: Expression
    tolerance: Annotated[float, Field(gt=0, description="Relative change that ends the iteration.")] = 1e-9
    max_iterations: Annotated[int, Field(ge=1, le=100000)] = 200


class Differential(_RelationBase):
    """`d(defines)/d(with_respect_to) = expression`, integrated from `start` to the value of
    `with_respect_to`, starting at `initial`."""

    kind: Literal["differential"]
    defines: Name
    with_respect_to: Name
    expression: Expression
    initial: Expression
    start: Expression = "0"


class Stochastic(_RelationBase):
    """A random variable; its deterministic value is the distribution's mean."""

    kind: Literal["stochastic"]
    defines: Name
    distribution: Literal["normal", "lognormal", "uniform", "exponential"]
    parameters: Annotated[dict[str, str], Field(description=(
        "normal: mean, sd; lognormal: median, sigma (dimensionless); uniform: low, high; "
        "exponential: rate (per unit of the variable)."))]


# Each kind's rules (beyond this syntax) live in its module under gpustack_compiler/language/kinds/.
_RELATION_MODELS = (Identity, Variant, Approximation, Piecewise, Iterative, Differential, Stochastic, Constraint)
Relation = Annotated[Union[_RELATION_MODELS], Field(discriminator="kind")]  # noqa: UP007 (a tuple of models: no `|` form)
RELATION_KINDS = tuple(get_args(model.model_fields["kind"].annotation)[0] for model in _RELATION_MODELS)


class SystemFile(Strict):
    """A file in a system folder: variables and/or relations of that system."""

    variables: list[Variable] = Field(default_factory=list)
    relations: list[Relation] = Field(default_factory=list)


class SystemSpec(Strict):
    name: Annotated[str, Field(pattern=KEY_PATTERN, description="Folder name under catalog/.")]
    prefix: Annotated[str, Field(pattern=KEY_PATTERN, description="First segment of every name.")]
    description: Annotated[str, Field(min_length=1)]


class SystemsFile(Strict):
    systems: list[SystemSpec]
    headline_targets: Annotated[list[str], Field(
        default_factory=list, description="The questions users ask; every system should feed one.")]


class BaseDimension(Strict):
    name: Annotated[str, Field(pattern=KEY_PATTERN)]
    unit: Annotated[str, Field(description="Symbol of the coherent base unit.")]
    description: str


class UnitDef(Strict):
    symbol: str
    definition: Annotated[str, Field(description="Scale times a product of units: `1e3 * W`, `J / s`.")]
    name: str | None = None


class AmbiguousSymbol(Strict):
    symbol: str
    hint: str


class UnitsFile(Strict):
    base_dimensions: list[BaseDimension]
    units: list[UnitDef] = Field(default_factory=list)
    ambiguous: list[AmbiguousSymbol] = Field(default_factory=list)
    references: RefKeys = Field(default_factory=list)


class Constant(Strict):
    name: Annotated[str, Field(description="`const.` + name.")]
    value: float
    units: str
    description: Annotated[str, Field(min_length=1)]
    symbol: str | None = None
    exact: Annotated[bool, Field(description="Exact by definition of the SI (2019).")] = False
    references: RefKeys = Field(default_factory=list)


class ConstantsFile(Strict):
    constants: list[Constant]


class Reference(Strict):
    key: Annotated[str, Field(pattern=KEY_PATTERN)]
    kind: ReferenceKind
    citation: Annotated[str, Field(min_length=1, description="Authors, title, venue or publisher.")]
    year: Annotated[int, Field(ge=1600, le=2100)]
    url: str | None = None
    doi: str | None = None
    isbn: str | None = None
    locator: Annotated[str | None, Field(description="Where in the source: section, equation, table.")] = None


class ReferencesFile(Strict):
    references: list[Reference]


class Quantity(Strict):
    value: float
    units: str = "1"
    sd: Annotated[float | None, Field(ge=0, description=(
        "Standard deviation in the same units (a fitted value's uncertainty); estimates sample it."))] = None
    reference: Annotated[str | None, Field(description="Reference key for this number.")] = None
    note: str | None = None


# ASCII digits only: `\d` would also read a full-width `５` or an Arabic-Indic `٥` as 5.
QUANTITY_RE = re.compile(r"^\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*(.*?)\s*$", re.ASCII)


def parse_quantity(value, default_units: str) -> Quantity:
    """`'0.5 kW'`, a bare number (in the declared unit) or a Quantity; raises ValueError."""
    if isinstance(value, Quantity):
        return value
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a number")
    if isinstance(value, (int, float)):
        return Quantity(value=finite(value), units=default_units)
    match = QUANTITY_RE.match(str(value))
    if not match:
        raise ValueError(f"cannot read {str(value)[:80]!r} as a number with a unit (e.g. `0.5 kW`)")
    return Quantity(value=finite(match.group(1)), units=match.group(2) or default_units)


def finite(number) -> float:
    """`number` as a finite float; ValueError for one that overflows it (`1e400`, a 400-digit integer)
    or is not a number (`nan`), which would otherwise turn every figure downstream into inf or nan."""
    try:
        value = float(number)
    except OverflowError:
        value = math.inf
    if not math.isfinite(value):
        shown = str(number)
        raise ValueError(f"{shown[:20] + '...' if len(shown) > 24 else shown} is not a finite number")
    return value


class Fit(Strict):
    """How a fitted preset was made, so it can be reproduced and audited."""

    method: str
    data: Annotated[list[str], Field(description="Files the parameters were fitted to.")]
    data_sha256: str
    observations: Annotated[list[str], Field(default_factory=list, description=(
        "Ids of the observations (data/observations) fitted to: `gpustack validate` refuses to score them."))]
    rows: int
    mape: float
    max_abs_error: float
    bias: float
    territory: Annotated[dict[Name, list[float]], Field(default_factory=dict, description=(
        "Each condition root's [lowest, highest] value (declared units) among the rows fitted to: the territory "
        "the fit has seen; outside it an estimate that uses the preset abstains."))]


class Preset(Strict):
    """Named assignments with units and variant selections; sourced data, fitted to data, or a fixture."""

    name: Annotated[str, Field(pattern=KEY_PATTERN)]
    description: Annotated[str, Field(min_length=1)]
    provenance: Literal["sourced", "fitted", "synthetic_fixture"]
    fit: Fit | None = None
    source: Annotated[str, Field(min_length=1, description="Where the values come from, in words.")]
    references: RefKeys = Field(default_factory=list)
    variants: dict[str, str] = Field(default_factory=dict)
    modes: Annotated[list[str], Field(
        default_factory=list,
        description="Variant keys chosen wherever a variable has a variant with that key (e.g. dense, gqa).")]
    assignments: Annotated[dict[str, Quantity | str | float], Field(
        default_factory=dict,
        description="Variable -> `'500 W'`, a bare number in the declared unit, or {value, units, reference}.")]
    targets: Annotated[dict[str, str], Field(
        default_factory=dict, description="Label -> variable this preset is meant to resolve.")]


class PresetFile(Strict):
    presets: list[Preset]


# ---- bindings: what the engine's analyses mean by catalog names (catalog/bindings/) ----------------

FieldPath = Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)*$", description=(
    "A field of the run file (schemas/run.schema.json) as a dotted path: `model.layers`, `tokens`."))]
Key = Annotated[str, Field(pattern=KEY_PATTERN)]
BoundValue = Annotated[float | str, Field(description=(
    "A number in the variable's declared units, or a number with its unit: `4 B`, `0 m`."))]
FieldValue = Annotated[bool | int | float | str, Field(description="A value as the run file writes it.")]


class FieldDefault(Strict):
    """The value of an unset optional field, from other fields of the same run."""

    field: FieldPath
    divided_by: Annotated[FieldPath | None, Field(description="Integer division by this field's value.")] = None


class VariableBinding(Strict):
    """A run-file field that sets a catalog variable."""

    field: FieldPath
    variable: Name
    read: Annotated[Literal["number", "boolean", "enumeration", "quantity"], Field(description=(
        "number: in the declared units (or `units`); boolean: false 0, true 1 unless `values` maps them; "
        "enumeration: a key of `values`; quantity: a number with its unit, as written."))] = "number"
    units: Annotated[str | None, Field(description="Units of the field's numbers, when not the declared ones.")] = None
    values: Annotated[dict[str, BoundValue] | None, Field(description=(
        "Field value -> the variable's value (enumeration keys; `\"false\"` and `\"true\"` for booleans)."))] = None
    default: Annotated[FieldDefault | list[FieldDefault] | None, Field(description=(
        "The value of the unset field; a list is tried in order, the first whose field the run gives wins."))] = None
    sweep: Annotated[Key | None, Field(description="Name of the field's axis on a sweep grid.")] = None
    note: str | None = None

    @model_validator(mode="after")
    def _values_fit_the_reading(self) -> VariableBinding:
        if self.read == "enumeration" and not self.values:
            raise ValueError("an enumeration needs `values`")
        if self.read == "boolean" and self.values is not None and set(self.values) != {"false", "true"}:
            raise ValueError('boolean `values` map exactly "false" and "true"')
        if self.read in ("number", "quantity") and self.values is not None:
            raise ValueError(f"`values` only apply to booleans and enumerations, not to a {self.read}")
        if self.read == "quantity" and self.units is not None:
            raise ValueError("a quantity carries its own unit; drop `units`")
        return self


class ModeBinding(Strict):
    """A variant mode every run takes: from a field's value, from whether an optional section is given, or
    always (then with the reason)."""

    field: FieldPath | None = None
    values: Annotated[dict[str, Key] | None, Field(description="Field value -> mode key.")] = None
    present: Annotated[Key | None, Field(description="The mode when the section `field` is given.")] = None
    absent: Annotated[Key | None, Field(description="The mode when it is not.")] = None
    always: Annotated[Key | None, Field(description="A mode of every run (no field).")] = None
    reason: str | None = None

    @model_validator(mode="after")
    def _one_form(self) -> ModeBinding:
        forms = [self.values is not None, self.present is not None or self.absent is not None,
                 self.always is not None]
        if sum(forms) != 1:
            raise ValueError("give exactly one of `values`, `present`/`absent`, or `always`")
        if (self.always is None) == (self.field is None):
            raise ValueError("`field` goes with `values` or `present`/`absent`; `always` takes none")
        if self.always is not None and not self.reason:
            raise ValueError("a mode of every run needs its `reason`")
        if forms[1] and (self.present is None or self.absent is None):
            raise ValueError("give both `present` and `absent`")
        return self


class RunFieldsFile(Strict):
    """catalog/bindings/run_fields.yaml: which run-file field sets which variable or mode."""

    variables: list[VariableBinding]
    modes: list[ModeBinding] = Field(default_factory=list)


class Sourced(Strict):
    reason: Annotated[str, Field(min_length=1)]
    references: RefKeys = Field(default_factory=list)


class ColumnBinding(Strict):
    column: Annotated[str, Field(min_length=1)]
    field: FieldPath


class HardwareKey(Strict):
    presets: Annotated[list[str], Field(min_length=1, description="Presets describing that machine, in order.")]
    description: Annotated[str, Field(min_length=1)]
    references: RefKeys = Field(default_factory=list)


class PrecisionKey(Sourced):
    preset: str


class Measure(Strict):
    """What a measured column is: one variable, or one per counting convention (named in the row)."""

    column: Annotated[str, Field(min_length=1)]
    variable: Name | None = None
    by_convention: dict[Key, Name] | None = None

    @model_validator(mode="after")
    def _one_form(self) -> Measure:
        if (self.variable is None) == (self.by_convention is None):
            raise ValueError("give exactly one of `variable` and `by_convention`")
        return self


class RowField(Sourced):
    field: FieldPath
    value: FieldValue


class RowPreset(Sourced):
    preset: str


class RowAssignment(Sourced):
    variable: Name
    value: BoundValue


class RowDefaults(Strict):
    """What every measured row takes for granted, each with its reason."""

    fields: list[RowField] = Field(default_factory=list)
    presets: list[RowPreset] = Field(default_factory=list)
    assignments: list[RowAssignment] = Field(default_factory=list)


class FlopConvention(Sourced):
    """The catalog variables a FLOP rate or utilization counted by one convention is compared with."""

    variables: Annotated[list[Name], Field(min_length=1)]


class MeasuredRunsFile(Strict):
    """catalog/bindings/measured_runs.yaml: how a row of measured iterations (CSV) becomes a run, and which
    variable a published FLOP figure of each counting convention measures."""

    columns: Annotated[list[ColumnBinding], Field(min_length=1)]
    hardware: dict[Key, HardwareKey]
    precision: dict[Key, PrecisionKey]
    measures: Annotated[list[Measure], Field(min_length=1, description=(
        "What the measure columns are; the first a row fills in is its figure."))]
    convention_column: Annotated[str | None, Field(description="The column naming a measure's convention.")] = None
    defaults: RowDefaults = RowDefaults()
    flop_conventions: Annotated[dict[Key, FlopConvention], Field(default_factory=dict, description=(
        "Convention -> the variables that count FLOPs that way; an observation of one of them names its "
        "convention, and it must be this one."))]


class FigureBinding(Strict):
    label: Annotated[str, Field(min_length=1)]
    variable: Name
    required: Annotated[bool, Field(description=(
        "The estimate fails (exit 1, listing what is missing) when this figure does not resolve."))] = False


class MemoryBinding(Strict):
    per_gpu: Name
    capacity: Name
    parts: list[Name] = Field(default_factory=list)
    buffers: Annotated[Name, Field(description="The part with no source; without it the fit is a headroom.")]


class Objective(Strict):
    variable: Name
    best: Literal["max", "min"]


class CostGroup(Strict):
    variable: Name
    group: Annotated[str, Field(min_length=1, description="The group its part is drawn in (capital, energy, ...).")]


class Breakdown(Strict):
    """A figure drawn as its parts."""

    variable: Name
    split: Annotated[bool, Field(description="Split each part once more.")] = False
    groups: list[CostGroup] = Field(default_factory=list, description=(
        "The group of a part (or of the part it was split from); a part named nowhere is `other`."))


class Breakdowns(Strict):
    """What a run page of the observatory and `gpustack estimate --plot` draw as parts: the step time as a
    waterfall, the cost per token as a stacked bar."""

    step: Breakdown
    cost: Breakdown


class FiguresFile(Strict):
    """catalog/bindings/figures.yaml: the estimate's figures, its memory fit, the sweep's objectives and
    the breakdowns drawn."""

    figures: Annotated[list[FigureBinding], Field(min_length=1)]
    memory: MemoryBinding
    objectives: Annotated[dict[Key, Objective], Field(min_length=1)]
    breakdowns: Breakdowns | None = None


class FitParameter(Strict):
    """One fitted value given to every root of its group (roots the data cannot tell apart)."""

    key: Key
    roots: Annotated[list[Name], Field(min_length=1)]
    initial: float
    low: float
    high: float

    @model_validator(mode="after")
    def _initial_within_bounds(self) -> FitParameter:
        if not self.low <= self.initial <= self.high:
            raise ValueError("needs low <= initial <= high")
        return self


class HeldValue(Sourced):
    """A root the data cannot separate from a fitted parameter, held at a stated value in the fit."""

    variable: Name
    value: float
    units: str = "1"


class Generation(Strict):
    """A hardware generation whose component measurements make a calibration preset of its own."""

    key: Key
    gpu_presets: Annotated[list[Name], Field(min_length=1, description=(
        "GPU presets of this generation: a run naming one of them takes the generation's preset."))]
    preset: Annotated[Name, Field(description="The preset `gpustack calibrate --components` writes.")]
    applied: Annotated[bool, Field(description=(
        "Whether `gpustack validate` applies the preset to runs of this generation (after the end-to-end "
        "calibration); false keeps the end-to-end calibration alone, for the reason given."))] = True
    reason: str | None = None
    held: list[HeldValue] = Field(default_factory=list, description=(
        "Component roots this generation's measurements cannot identify (one sequence length cannot separate "
        "an overhead from an efficiency): held at a stated value in its fit and written into its preset."))

    @model_validator(mode="after")
    def _reason_when_not_applied(self) -> Generation:
        if not self.applied and not self.reason:
            raise ValueError("a generation whose preset is not applied needs a `reason`")
        return self


class ComponentFit(Strict):
    """What the component calibration fits: each parameter on its own, per hardware generation, to kernel
    and memory benchmarks (never to end-to-end runs); a generation's preset holds the parameters its
    measurements identify."""

    parameters: Annotated[list[FitParameter], Field(min_length=1)]
    generations: Annotated[list[Generation], Field(min_length=1)]


class LearningFit(Strict):
    """What `gpustack calibrate --learning` fits to the local learning workload's measurements (calibration
    split): the learning roots of catalog/learning, each parameter on its own, and the roots one small model
    cannot identify, held at a stated prior."""

    target: Annotated[Name, Field(description="The measured variable the rows predict.")]
    preset: Annotated[Name, Field(description="The preset the learning fit writes.")]
    parameters: Annotated[list[FitParameter], Field(min_length=1)]
    held: list[HeldValue] = Field(default_factory=list)


class CalibrationFitFile(Strict):
    """catalog/bindings/calibration_fit.yaml: what `gpustack calibrate` fits and what it holds fixed."""

    parameters: Annotated[list[FitParameter], Field(min_length=1, description="In the order they are fitted.")]
    held: list[HeldValue] = Field(default_factory=list)
    components: ComponentFit | None = None
    learning: LearningFit | None = None
    preset: Annotated[Name, Field(description=(
        "The preset the end-to-end fit writes. A run naming it and a generation's GPU preset takes that "
        "generation's component preset right after it, in every command."))] = "calibration"


Limit = Annotated[float | Name, Field(description="A variable of the same units, or a number in its units.")]


class Requirement(Strict):
    """A condition a serving layout must meet to be ranked: `variable` at most, at least or below a limit."""

    label: Annotated[str, Field(min_length=1, description="The sweep's reason for rejecting a layout that fails it.")]
    variable: Name
    at_most: Limit | None = None
    at_least: Limit | None = None
    below: Limit | None = None

    @model_validator(mode="after")
    def _one_limit(self) -> Requirement:
        if sum(x is not None for x in (self.at_most, self.at_least, self.below)) != 1:
            raise ValueError("give exactly one of `at_most`, `at_least` and `below`")
        return self

    @property
    def limit(self) -> tuple[str, float | str]:
        """(`at_most` | `at_least` | `below`, the limit)."""
        return next((k, v) for k, v in (("at_most", self.at_most), ("at_least", self.at_least),
                                         ("below", self.below)) if v is not None)


class ServeFiguresFile(Strict):
    """catalog/bindings/serve_figures.yaml: what `gpustack estimate` reports for a serving run, the
    conditions a serving layout must meet, and what `gpustack sweep` ranks serving layouts by."""

    figures: Annotated[list[FigureBinding], Field(min_length=1)]
    requirements: list[Requirement] = Field(default_factory=list)
    objectives: Annotated[dict[Key, Objective], Field(min_length=1)]


class ReplayParameter(Strict):
    """A parameter of a datacenter replay and the catalog variable that supplies it (in base units)."""

    field: Key
    variable: Name
    optional: Annotated[bool, Field(description=(
        "The replay runs without it (the figures it feeds are reported as excluded)."))] = False
    note: str | None = None


class ServeReplayFile(Strict):
    """catalog/bindings/serve_replay.yaml: what the virtual datacenter's serving replay reads from a
    serving run's resolution."""

    parameters: Annotated[list[ReplayParameter], Field(min_length=1)]


Exposure = Literal["gpu", "node", "link", "switch", "job"]


class FailureClassBinding(Strict):
    """Independent exponential failures of one kind of part: `rate` per part, `count` parts of it per
    exposure unit `per` (one without `count`)."""

    name: Key
    rate: Name
    per: Exposure
    count: Name | None = None


class AggregateClass(Strict):
    """A per-GPU or per-node rate a preset may assign instead of the rates of its parts."""

    name: Key
    rate: Name
    per: Exposure
    parts: Annotated[list[Key], Field(min_length=1, description="Names of the failure classes it replaces.")]


class ModelSync(Strict):
    """What a cross-site synchronisation moves: `params` parameters of `bytes_per_param` each."""

    params: Name
    bytes_per_param: Name


class JobFailureRate(Strict):
    variable: Name
    fleet_variant: Annotated[Key, Field(description=(
        "When `variable` resolves through this variant the fleet class replaces the component classes: "
        "a fleet-measured per-node rate already lumps every infrastructure part."))]


class TrainingReplayFile(Strict):
    """catalog/bindings/training_replay.yaml: what the virtual datacenter's training replay reads from a
    training run's resolution, and the kinds of part whose failures interrupt the job."""

    parameters: Annotated[list[ReplayParameter], Field(min_length=1)]
    model_sync: ModelSync
    job_failure_rate: JobFailureRate
    fleet_class: FailureClassBinding
    failure_classes: Annotated[list[FailureClassBinding], Field(min_length=1)]
    aggregate_classes: list[AggregateClass] = Field(default_factory=list)


# File name under catalog/bindings/ -> its kind (the key of its table in the manifest's `bindings`).
BINDING_FILES: dict[str, tuple[str, type[Strict]]] = {
    "run_fields.yaml": ("run_fields", RunFieldsFile),
    "measured_runs.yaml": ("measured_runs", MeasuredRunsFile),
    "figures.yaml": ("figures", FiguresFile),
    "calibration_fit.yaml": ("calibration_fit", CalibrationFitFile),
    "serve_fields.yaml": ("serve_fields", RunFieldsFile),
    "serve_figures.yaml": ("serve_figures", ServeFiguresFile),
    "serve_replay.yaml": ("serve_replay", ServeReplayFile),
    "training_replay.yaml": ("training_replay", TrainingReplayFile),
}

FILE_MODELS: dict[str, type[Strict]] = {
    "system": SystemFile,
    "systems": SystemsFile,
    "units": UnitsFile,
    "constants": ConstantsFile,
    "references": ReferencesFile,
    "presets": PresetFile,
    **{kind: model for kind, model in BINDING_FILES.values()},
}
