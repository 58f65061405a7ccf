"""The run-field bindings (catalog/bindings/run_fields.yaml, carried in the manifest): which run-file
field sets which catalog variable or variant mode. Every analysis turns a run into a scenario through
`RunFields.scenario`, and a sweep reads its axes and their grid values here.

Values stay structured from the run file to the scenario: numbers, or Quantity when the field's
numbers carry units.
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Annotated

from pydantic import BaseModel, TypeAdapter, ValidationError
from pydantic.fields import FieldInfo

from gpustack_compiler.base.errors import CatalogError
from gpustack_compiler.base.yaml_lines import YamlError, load
from gpustack_compiler.language.models import Quantity

from .run import RunSpec
from .scenario import Scenario, ScenarioBuilder

ABSENT = object()  # a field inside an optional section the run does not give (model.moe.* without moe)
TRUE_WORDS, FALSE_WORDS = ("true", "yes", "1"), ("false", "no", "0")


def run_field(path: str, run_model: type[BaseModel] = RunSpec) -> FieldInfo | None:
    """The run-file model's declaration of a dotted field, or None when there is no such field."""
    model: type[BaseModel] | None = run_model
    field = None
    for part in path.split("."):
        field = model.model_fields.get(part) if model is not None else None
        if field is None:
            return None
        model = next((t for t in (field.annotation, *typing.get_args(field.annotation))
                      if isinstance(t, type) and issubclass(t, BaseModel)), None)
    return field


def check_field(path: str, file: str, line: int, run_model: type[BaseModel] = RunSpec) -> None:
    """CatalogError at the binding's file and line unless `path` is a field of the run file `run_model`."""
    if run_field(path, run_model) is None:
        raise CatalogError(f"{file}:{line}: `{path}` is not a field of "
                           f"{run_model.__doc__.strip().rstrip('.').lower()}")


@functools.cache
def _field_adapter(path: str, run_model: type[BaseModel]) -> TypeAdapter:
    field = run_field(path, run_model)
    return TypeAdapter(Annotated[(field.annotation, *field.metadata)] if field.metadata else field.annotation)


def as_run_field(path: str, raw, run_model: type[BaseModel] = RunSpec):
    """`raw` read as the run file's field `path` would be, with its type and bounds (a grid or CSV value
    the run file itself could not hold, `tp=-1`, `tp=1.5`, `sequence_parallel=maybe`, is a ValueError).
    Text is read as the YAML scalar a run file or `--set` would hold: `zero_stage=1` is the integer 1, which
    a field of literal integer choices takes and the text '1' is not."""
    value = raw
    if isinstance(raw, str):
        try:
            value = load(raw)[0]
        except YamlError:
            pass  # left as text: the field's own validation says what is wrong with it
    try:
        return _field_adapter(path, run_model).validate_python(value)
    except ValidationError as exc:
        raise ValueError(f"{raw!r}: {exc.errors(include_url=False)[0]['msg']}") from None


def field_value(run: RunSpec, path: str):
    """The run's value of a dotted field; ABSENT inside an optional section the run leaves out."""
    node = run
    for part in path.split("."):
        if node is None:
            return ABSENT
        node = getattr(node, part)
    return node


def read_boolean(value) -> bool:
    """A boolean as a run file, a grid or a CSV writes it; ValueError otherwise."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in TRUE_WORDS or text in FALSE_WORDS:
        return text in TRUE_WORDS
    raise ValueError(f"expected true or false, got {value!r}")


@dataclass(frozen=True)
class FieldBinding:
    field: str
    variable: str
    read: str  # number | boolean | enumeration | quantity
    units: str | None
    values: dict | None
    default: list[dict] | dict | None
    sweep: str | None
    file: str
    line: int

    def bound(self, value):
        """The variable's value for the field's value."""
        if self.read == "boolean":
            return self.values["true" if value else "false"] if self.values else int(value)
        if self.read == "enumeration":
            if str(value) not in self.values:
                raise CatalogError(f"{self.file}:{self.line}: {self.field} = {value!r} has no value for "
                                   f"{self.variable} (values: {', '.join(sorted(self.values))})")
            return self.values[str(value)]
        if self.units is not None:
            return Quantity(value=value, units=self.units)
        return value

    def parse(self, raw, run_model: type[BaseModel] = RunSpec):
        """A field value from a grid entry (text, or already a value); ValueError when it cannot be read or
        is outside what the run file (`run_model`) allows for the field."""
        if self.read == "boolean":
            return read_boolean(raw)
        if self.read == "enumeration":
            if str(raw) not in self.values:
                raise ValueError(f"{raw!r} is not one of {', '.join(sorted(self.values))}")
            return str(raw)
        if self.read == "quantity" or not isinstance(raw, str):
            return raw
        return as_run_field(self.field, raw, run_model)


@dataclass(frozen=True)
class ModeRule:
    field: str | None
    values: dict | None
    present: str | None
    absent: str | None
    always: str | None
    file: str
    line: int

    def mode(self, value) -> str:
        if self.always is not None:
            return self.always
        if self.values is None:
            return self.absent if value is None or value is ABSENT else self.present
        if str(value) not in self.values:
            raise CatalogError(f"{self.file}:{self.line}: no mode for {self.field} = {value!r}")
        return self.values[str(value)]


def _entry(cls, record: dict, file: str):
    """A table entry of the manifest as its dataclass (keys the table leaves out are None)."""
    return cls(file=file, **{f.name: record.get(f.name) for f in dataclasses.fields(cls) if f.name != "file"})


class RunFields:
    """Typed view of the run-field bindings; every field path is checked against the run-file model
    (training runs by default; serving runs for catalog/bindings/serve_fields.yaml)."""

    def __init__(self, table: dict, run_model: type[BaseModel] = RunSpec,
                 presets: Callable[[RunSpec, Collection[str]], list[str]] | None = None):
        """`presets(run, known)`: the presets a run's scenario applies, in order (Facts.run_presets); by
        default the run's own."""
        self._presets = presets or (lambda run, known: run.presets_in_order())
        file = table["file"]
        self.variables = [_entry(FieldBinding, b, file) for b in table["variables"]]
        self.modes = [_entry(ModeRule, r, file) for r in table["modes"]]
        self._defaults = {b.field: b.default if isinstance(b.default, list) else [b.default]
                          for b in self.variables if b.default}
        for b in self.variables:
            for path in (b.field, *(d[k] for d in self._defaults.get(b.field, []) for k in ("field", "divided_by")
                                    if d.get(k))):
                check_field(path, file, b.line, run_model)
        for r in self.modes:
            if r.field is not None:
                check_field(r.field, file, r.line, run_model)

    @property
    def axes(self) -> dict[str, FieldBinding]:
        """Sweep axis name -> its binding, in table order."""
        return {b.sweep: b for b in self.variables if b.sweep}

    def value(self, run: RunSpec, path: str):
        """The run's value of a field, with the default the bindings give an unset one."""
        value = field_value(run, path)
        for default in self._defaults.get(path, []) if value is None else []:
            value = field_value(run, default["field"])
            if value is None or value is ABSENT:
                continue
            if "divided_by" in default:
                value //= field_value(run, default["divided_by"])
            break
        return value

    def bind(self, run: RunSpec) -> tuple[dict[str, object], list[str]]:
        """Variable -> value, and the variant modes, that the run's fields set."""
        assignments = {}
        for b in self.variables:
            value = self.value(run, b.field)
            if value is not None and value is not ABSENT:
                assignments[b.variable] = b.bound(value)
        modes = [r.mode(field_value(run, r.field) if r.field else None) for r in self.modes]
        return assignments, modes

    def scenario(self, scenarios: ScenarioBuilder, run: RunSpec) -> Scenario:
        """The scenario a run describes: its presets in order (with its generation's component calibration,
        see Facts.run_presets), the values and modes its fields set, then its own assignments, variant
        selections and modes."""
        assignments, modes = self.bind(run)
        return scenarios.build(self._presets(run, scenarios.presets), {**assignments, **run.assign}, run.variants,
                               [*modes, *run.modes], origin=f"run {run.name}")
