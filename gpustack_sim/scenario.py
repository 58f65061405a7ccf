"""A scenario: presets combined in order (later ones win), then overrides, as values in base units."""

from __future__ import annotations

from dataclasses import dataclass, field

from gpustack_compiler.catalog import parse_quantity
from gpustack_compiler.errors import UsageError
from gpustack_compiler.suggest import did_you_mean
from gpustack_compiler.units import UnitError, UnitSystem


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

    def holding(self, names) -> "Scenario":
        """The same scenario with `names` kept symbolic (sampled, swept or fitted) instead of assigned."""
        names = frozenset(names)
        return Scenario({k: v for k, v in self.assignments.items() if k not in names}, dict(self.variants),
                        list(self.presets), names, list(self.modes))


class ScenarioBuilder:
    def __init__(self, manifest: dict):
        self.manifest = manifest
        self.units = UnitSystem.from_manifest(manifest["units"])

    def quantity(self, name: str, value, origin: str) -> Assigned:
        """Convert `value` ('0.5 kW', a bare number in the declared unit) to base units for `name`."""
        var = self.manifest["variables"].get(name)
        if var is None:
            raise UsageError(f"{origin}: unknown variable `{name}`", did_you_mean(name, self.manifest["variables"]))
        try:
            q = parse_quantity(value, var["units"])
            unit = self.units.parse(q.units)
        except (UnitError, ValueError) as exc:
            raise UsageError(f"{origin}: `{name}`: {exc}") from None
        declared = self.units.parse(var["units"])
        if unit.dim != declared.dim:
            raise UsageError(f"{origin}: `{name}` is in {var['units']} "
                             f"({self.units.format_dim(declared.dim)}); {q.units!r} is "
                             f"{self.units.format_dim(unit.dim)}")
        return Assigned(q.value * unit.scale, origin, f"{q.value:g}" + (f" {q.units}" if q.units != "1" else ""))

    def build(self, presets: list[str], assign: list[str], variants: list[str],
              modes: list[str] = ()) -> Scenario:
        scenario = Scenario()
        known = self.manifest.get("presets", {})
        for name in presets:
            preset = known.get(name)
            if preset is None:
                raise UsageError(f"unknown preset `{name}`", did_you_mean(name, known))
            scenario.presets.append(name)
            for var, value in preset["assignments"].items():
                assigned = self.quantity(var, _from_manifest(value), f"preset {name}")
                if isinstance(value, dict) and value.get("sd") is not None:
                    units = value.get("units") or self.manifest["variables"][var]["units"]
                    assigned = Assigned(assigned.value, assigned.origin, assigned.given,
                                        value["sd"] * self.units.parse(units).scale)
                scenario.assignments[var] = assigned
            scenario.variants.update(preset["variants"])
            scenario.modes.extend(m for m in preset.get("modes", []) if m not in scenario.modes)
        for item in assign:
            var, value = _split(item, "--assign", "NAME=VALUE, e.g. gpu.power.total='0.5 kW'")
            scenario.assignments[var] = self.quantity(var, value, "--assign")
        for item in variants:
            var, key = _split(item, "--variant", "NAME=KEY, e.g. training.flops_per_step=dense")
            if var not in self.manifest["variables"]:
                raise UsageError(f"--variant: unknown variable `{var}`", did_you_mean(var, self.manifest["variables"]))
            scenario.variants[var] = key
        keys = {r["variant"] for r in self.manifest["relations"].values() if r["kind"] == "variant"}
        for mode in modes:
            if mode not in keys:
                raise UsageError(f"--mode {mode}: no variable has a variant keyed `{mode}`", did_you_mean(mode, keys))
            if mode not in scenario.modes:
                scenario.modes.append(mode)
        return scenario


def _split(item: str, flag: str, example: str) -> tuple[str, str]:
    name, sep, value = item.partition("=")
    if not sep or not name.strip() or not value.strip():
        raise UsageError(f"{flag} {item!r}: expected {example}")
    return name.strip(), value.strip()


def _from_manifest(value):
    """Manifest presets hold '500 W', a number, or {value, units, reference}."""
    if isinstance(value, dict):
        return f"{value['value']!r} {value.get('units', '')}".strip()
    return value
