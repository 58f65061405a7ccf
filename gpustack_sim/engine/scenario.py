"""A scenario: presets combined in order (later ones win), then overrides, as values in base units."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from gpustack_compiler.base.errors import InputError, ResolveError, ViolationError
from gpustack_compiler.base.suggest import did_you_mean
from gpustack_compiler.language.models import parse_quantity
from gpustack_compiler.language.units import UnitError, UnitSystem
from gpustack_compiler.manifest.records import Tables, VariableRecord
from gpustack_compiler.manifest.source import GraphSource

from .domain import domain_checks


@dataclass(frozen=True)
class Assigned:
    value: float  # in coherent base units
    origin: str  # preset name or "--assign"
    given: str  # as written, for traces
    sd: float | None = None  # uncertainty in base units, where the source gives one


@dataclass
class Scenario:
    assignments: dict[str, Assigned] = field(default_factory=dict)
    variants: dict[str, str] = field(default_factory=dict)
    presets: list[str] = field(default_factory=list)
    sampled: frozenset[str] = frozenset()  # boundaries kept symbolic: their values come from samples
    modes: list[str] = field(default_factory=list)  # variant keys chosen wherever they exist

    def holding(self, names) -> Scenario:
        """The same scenario with `names` kept symbolic (sampled, swept or fitted) instead of assigned."""
        names = frozenset(names)
        return Scenario({k: v for k, v in self.assignments.items() if k not in names}, dict(self.variants),
                        list(self.presets), names, list(self.modes))


class ScenarioBuilder:
    """Builds scenarios from the compiled catalog's presets, in coherent base units."""

    def __init__(self, source: GraphSource, tables: Tables, units: UnitSystem, allow_violations: bool = False):
        self.source = source
        # When False, an assigned value that violates its variable's assumptions or bounds is refused.
        self.allow_violations = allow_violations
        self.presets: dict[str, dict] = tables.presets
        self.variant_keys: frozenset[str] = tables.variant_keys
        self.units = units
        self._records: dict[str, VariableRecord] = {}

    def records(self, names: Iterable[str]) -> dict[str, VariableRecord]:
        """Variable records by name; those not seen yet are fetched in one batch (a run assigns hundreds
        of variables, and Neo4j would answer each lookup in a round trip of its own)."""
        unseen = [n for n in dict.fromkeys(names) if n not in self._records]
        if unseen:
            self._records.update(self.source.variables(unseen))
        return self._records

    def variable(self, name: str, origin: str) -> VariableRecord:
        var = self.records([name]).get(name)
        if var is None:
            raise InputError(f"{origin}: unknown variable `{name}`", did_you_mean(name, self.source.names()))
        return var

    def quantity(self, name: str, value, origin: str, power: int = 1) -> Assigned:
        """Convert `value` ('0.5 kW', a bare number in the declared unit) to base units for `name`; with
        `power`, a quantity in that power of the variable's unit (a rate per unit of it: -1, a
        dimensionless spread: 0), as a distribution's parameter may be."""
        var = self.variable(name, origin)
        units = {1: var.units, 0: "1"}.get(power, f"({var.units})**{power}")
        try:
            q = parse_quantity(value, units)
            unit = self.units.parse(q.units)
        except (UnitError, ValueError) as exc:
            raise InputError(f"{origin}: `{name}`: {exc}") from None
        wanted = self.units.parse(units)
        if unit.dim != wanted.dim:
            raise InputError(f"{origin}: `{name}` takes {units} ({self.units.format_dim(wanted.dim)}); "
                             f"{q.units!r} is {self.units.format_dim(unit.dim)}")
        return Assigned(q.value * unit.scale, origin, f"{q.value:g}" + (f" {q.units}" if q.units != "1" else ""))

    def build(self, presets: Sequence[str] = (), assign: Mapping[str, object] | None = None,
              variants: Mapping[str, str] | None = None, modes: Sequence[str] = (),
              origin: str = "--assign") -> Scenario:
        """Presets in order (later ones win), then `assign` (NAME -> '0.5 kW' or a number in declared
        units), `variants` (NAME -> KEY) and `modes` (variant keys chosen wherever they exist)."""
        scenario = Scenario()
        for name in presets:
            if name not in self.presets:
                raise InputError(f"unknown preset `{name}`", did_you_mean(name, self.presets))
        self.records([*(var for name in presets for var in self.presets[name]["assignments"]), *(assign or {}),
                      *(variants or {})])
        for name in presets:
            preset = self.presets[name]
            scenario.presets.append(name)
            for var, value in preset["assignments"].items():
                assigned = self.quantity(var, _from_manifest(value), f"preset {name}")
                if isinstance(value, dict) and value.get("sd") is not None:
                    units = value.get("units") or self.variable(var, f"preset {name}").units
                    assigned = Assigned(assigned.value, assigned.origin, assigned.given,
                                        value["sd"] * self.units.parse(units).scale)
                scenario.assignments[var] = assigned
            scenario.variants.update(preset["variants"])
            scenario.modes.extend(m for m in preset.get("modes", []) if m not in scenario.modes)
        for var, value in (assign or {}).items():
            scenario.assignments[var] = self.quantity(var, value, origin)
        self._check_variants(variants or {})
        scenario.variants.update(variants or {})
        for mode in modes:
            if mode not in self.variant_keys:
                raise InputError(f"--mode {mode}: no variable has a variant keyed `{mode}`",
                                 did_you_mean(mode, self.variant_keys))
            if mode not in scenario.modes:
                scenario.modes.append(mode)
        if not self.allow_violations:
            self.refuse_violations(scenario)
        return scenario

    def _check_variants(self, variants: Mapping[str, str]) -> None:
        """InputError for a selection naming no variant (key or relation) of its variable: the resolver would
        meet it only where the variable is in a target's cone, and ignore it elsewhere."""
        if not variants:
            return
        defs = self.source.relations_defining(list(variants))
        for var, key in variants.items():
            self.variable(var, "--variant")
            mine = [d for d in defs if d.get("defines") == var]
            if not any(key in (d.get("variant"), d["name"]) for d in mine):
                keys = sorted(d["variant"] for d in mine if d.get("variant"))
                raise ResolveError(f"--variant {var}={key}: `{var}` has no variant `{key}`",
                                 did_you_mean(key, keys) or (f"choices: {', '.join(keys)}" if keys
                                                             else f"`{var}` has no variants"))

    def refuse_violations(self, scenario: Scenario) -> None:
        """ViolationError for the first assigned value outside its variable's assumptions or bounds."""
        records = self.records(scenario.assignments)
        for var, assigned in scenario.assignments.items():
            violated = [d for kind, status, d in domain_checks(records[var], assigned.value) if status == "violated"]
            if violated:
                raise ViolationError(f"{assigned.origin}: `{var}` = {assigned.given}: {violated[0]}",
                                     "pass --allow-violations to compute with it anyway")


def _from_manifest(value):
    """Manifest presets hold '500 W', a number, or {value, units, reference}."""
    if isinstance(value, dict):
        return f"{value['value']!r} {value.get('units', '')}".strip()
    return value
