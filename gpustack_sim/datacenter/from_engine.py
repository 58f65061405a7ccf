"""The one bridge from the engine to the datacenter: resolve a run's variables, build JobParameters."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..engine.resolver import Resolution, ResolveError
from .parameters import (AGGREGATE_CLASSES, BYTES_PER_PARAM_VARIABLE, CATALOG_PARAMETERS, FAILURE_CLASSES,
                         FLEET_CLASS, PARAMS_VARIABLE, JobParameters, failure_classes)

if TYPE_CHECKING:
    from ..engine.context import EngineContext
    from ..engine.run import RunSpec

JOB_FAILURE_RATE = "cluster.rel.job_failure_rate"


def job_parameters(context: EngineContext, run: RunSpec) -> tuple[JobParameters, dict[str, Resolution]]:
    """JobParameters for `run` and the resolutions (traces) of every variable it was built from."""
    names = sorted({*CATALOG_PARAMETERS.values(), PARAMS_VARIABLE, BYTES_PER_PARAM_VARIABLE, JOB_FAILURE_RATE,
                    FLEET_CLASS[1], *(v for _, v, _, c in FAILURE_CLASSES for v in (v, c) if v),
                    *(v for v, _, _ in AGGREGATE_CLASSES.values())})
    names = [n for n in names if context.resolver.variable(n) is not None]
    resolved = context.resolver.resolve_many(names, context.run_scenario(run))
    traces = {n: r for n, r in resolved.items() if not isinstance(r, ResolveError) and r.value is not None}
    values = {n: r.value * r.scale for n, r in traces.items()}
    rate = traces.get(JOB_FAILURE_RATE)
    fleet = rate is not None and any(s.variable == JOB_FAILURE_RATE and s.variant == "fleet_per_node"
                                     for s in rate.trace)
    classes, excluded = failure_classes(values, fleet)
    return JobParameters.from_values(values, classes, excluded), traces
