"""The interleave a run file leaves out: the valid value with the highest throughput, found by the sweep over
the `interleave` axis with every other field as the run gives it, and said in the output."""

from __future__ import annotations

from gpustack_compiler.base.errors import InputError

from ..engine.facts import Facts
from ..engine.resolver import Resolver
from ..engine.run import RunSpec
from ..engine.scenario import ScenarioBuilder
from .sweep import sweep

AXIS, OBJECTIVE = "interleave", "tokens_per_sec"


def settle_interleave(resolver: Resolver, scenarios: ScenarioBuilder, facts: Facts,
                      run: RunSpec) -> tuple[RunSpec, str | None]:
    """The run with its interleave set, and a note saying how it was chosen (None when the run gave it)."""
    lay = run.layout
    if "interleave" in lay.model_fields_set:
        return run, None
    if lay.pp == 1:
        return _with(run, 1), "interleave 1 (no pipeline parallelism)"
    candidates = list(range(1, run.model.layers + 1))
    try:
        result = sweep(resolver, scenarios, facts, _with(run, 1), {AXIS: candidates}, OBJECTIVE, len(candidates))
    except InputError as exc:
        return _with(run, 1), f"interleave 1: none could be chosen ({exc.args[0]})"
    if not result.top:
        return _with(run, 1), f"interleave 1: no value is valid ({'; '.join(sorted(result.rejected))})"
    best = result.top[0][AXIS]
    valid = ", ".join(str(v) for v in sorted(r[AXIS] for r in result.top))
    return _with(run, best), f"interleave {best} chosen by the model: the highest throughput of the valid values {valid}"


def _with(run: RunSpec, interleave: int) -> RunSpec:
    return run.model_copy(update={"layout": run.layout.model_copy(update={"interleave": interleave})})
