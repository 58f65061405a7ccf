"""The one bridge from the engine to the datacenter: resolve a run's variables, build JobParameters."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..engine.resolver import Resolution, ResolveError
from .parameters import JobParameters, failure_classes

if TYPE_CHECKING:
    from ..engine.context import EngineContext
    from ..engine.run import RunSpec


def job_parameters(context: EngineContext, run: RunSpec) -> tuple[JobParameters, dict[str, Resolution]]:
    """JobParameters for `run` and the resolutions (traces) of every variable it was built from."""
    binding = context.facts.training_replay
    names = [n for n in binding.variables if context.resolver.variable(n) is not None]
    scenario = context.run_scenario(run)
    resolved = context.resolver.resolve_many(names, scenario)
    traces = {n: r for n, r in resolved.items() if not isinstance(r, ResolveError) and r.value is not None}
    values = {n: r.value * r.scale for n, r in traces.items()}
    rate = traces.get(binding.job_failure_rate)
    fleet = rate is not None and any(s.variable == binding.job_failure_rate and s.variant == binding.fleet_variant
                                     for s in rate.trace)
    # A rate assigned with an uncertainty (a fleet count's) keeps it, in the same base units as its value.
    sds = {n: a.sd for n, a in scenario.assignments.items() if a.sd and n in values}
    classes, excluded = failure_classes(values, binding, fleet, sds)
    return JobParameters.from_values(values, binding, classes, excluded), traces
