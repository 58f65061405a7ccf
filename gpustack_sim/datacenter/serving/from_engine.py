"""The one bridge from the engine to the serving replay: resolve a serving run's replay parameters."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpustack_compiler.base.errors import InputError

from ...engine.resolver import ResolveError
from .parameters import ReplicaParameters

if TYPE_CHECKING:
    from ...engine.context import EngineContext
    from ...engine.serve_run import ServeRunSpec


def replica_parameters(engine: EngineContext, run: ServeRunSpec) -> tuple[ReplicaParameters, dict[str, str]]:
    """The replay's parameters for `run`, and the catalog variable behind each field."""
    binding = engine.facts.serve_replay
    names = sorted({v for _, v, _ in binding if engine.resolver.variable(v) is not None})
    resolved = engine.resolver.resolve_many(names, engine.run_scenario(run))
    values, missing = {}, []
    for field, var, optional in binding:
        r = resolved.get(var)
        if r is None or isinstance(r, ResolveError) or r.value is None:
            if not optional:
                missing.append(var)
            continue
        values[field] = r.value * r.scale
    if missing:
        raise InputError(f"{run.name}: not resolved for the serving replay: {', '.join(missing)}",
                         "assign them in the run file or a preset")
    return ReplicaParameters.from_values(values), {f: v for f, v, _ in binding}
