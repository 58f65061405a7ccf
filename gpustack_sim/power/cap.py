"""Clock, power and throughput of compute-bound and memory-bound phases under a board power cap: the
catalog's `gpu.cap.*` relations (catalog/gpu/power_cap.yaml) resolved for one cap in one scenario. The
function is the catalog's, so a caller (an inference fleet, a sweep over caps) gets the same figures and the
same missing roots as `gpustack resolve gpu.cap.clock_compute --assign gpu.cap.power=...`."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from gpustack_compiler.base.errors import InputError, ResolveError

if TYPE_CHECKING:
    from ..engine.resolver import Resolver
    from ..engine.scenario import Scenario, ScenarioBuilder

CAP_VARIABLE = "gpu.cap.power"
# figure -> catalog variable (values in the variable's declared units)
CAP_FIGURES: dict[str, str] = {
    "clock_compute": "gpu.cap.clock_compute",
    "clock_memory": "gpu.cap.clock_memory",
    "power_compute": "gpu.cap.power_compute",
    "power_memory": "gpu.cap.power_memory",
    "throughput_compute": "gpu.cap.throughput_compute",
    "throughput_memory": "gpu.cap.throughput_memory",
}


@dataclass(frozen=True)
class CapResponse:
    """The figures under one cap: a value in `units[figure]`, or None with the roots it still needs in
    `missing` (root -> family)."""

    cap_w: float
    values: dict[str, float | None]
    units: dict[str, str]
    missing: dict[str, str | None]

    @property
    def resolved(self) -> bool:
        return all(v is not None for v in self.values.values())

    def to_dict(self) -> dict:
        return {"cap_w": self.cap_w, "values": self.values, "units": self.units, "missing": self.missing}


def power_under_cap(resolver: Resolver, scenarios: ScenarioBuilder, scenario: Scenario, cap_w: float) -> CapResponse:
    """Resolve every figure of CAP_FIGURES in `scenario` with the board capped at `cap_w` watts (an
    assignment of `gpu.cap.power` that replaces any the scenario holds)."""
    if not (isinstance(cap_w, (int, float)) and math.isfinite(cap_w) and cap_w > 0):
        raise InputError(f"power cap {cap_w!r} W is not a positive number")
    assigned = scenarios.quantity(CAP_VARIABLE, f"{cap_w!r} W", "power cap")
    capped = replace(scenario, assignments={**scenario.assignments, CAP_VARIABLE: assigned})
    out = resolver.resolve_many(list(CAP_FIGURES.values()), capped)
    values, units, missing = {}, {}, {}
    for figure, name in CAP_FIGURES.items():
        res = out[name]
        if isinstance(res, ResolveError):
            raise res
        values[figure], units[figure] = res.value, res.units
        for root, meta in res.missing.items():
            missing[root] = meta.get("family")
    return CapResponse(float(cap_w), values, units, dict(sorted(missing.items())))
