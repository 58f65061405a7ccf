"""The interleave a run file leaves out: the valid value with the highest throughput, found by the sweep over
the `interleave` axis with every other field as the run gives it, and said in the output with the spread of
throughput over every valid value, since an unpublished interleave is a layout choice the estimate does not
know (between the slowest and the fastest valid choice the answer can move by tens of percent)."""

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
    unfit = _unfit(resolver, scenarios, facts, run, {r[AXIS] for r in result.top}, result.units)
    if not result.top:
        return _with(run, 1), f"interleave 1: no value is valid ({'; '.join(sorted(result.rejected))}){unfit}"
    best = result.top[0][AXIS]
    valid = ", ".join(str(v) for v in sorted(r[AXIS] for r in result.top))
    rates = [r[OBJECTIVE] for r in result.top]
    spread = (f"; over them throughput spans {min(rates):.4g} to {max(rates):.4g} {result.units} "
              f"({100 * (max(rates) / min(rates) - 1):.1f}% apart), a layout uncertainty the interval does not hold"
              if len(rates) > 1 else "")
    return _with(run, best), (f"interleave {best} chosen by the model: the highest throughput of the valid values "
                              f"{valid}{spread}{unfit}")


def _unfit(resolver: Resolver, scenarios: ScenarioBuilder, facts: Facts, run: RunSpec, valid: set,
           units: str) -> str:
    """The interleaves the pipeline's shape allows (each stage's chunks whole layers, micro-batches a multiple
    of pp) that the sweep rejected only for memory, with the throughput each would give: an unpublished
    interleave the run may well have used, since the activation count is the model's."""
    lay, layers = run.layout, run.model.layers
    if lay.first_stage_layers is None:
        per_stage = layers / lay.pp
    else:
        middle = (layers - lay.first_stage_layers - lay.last_stage_layers) / max(lay.pp - 2, 1) if lay.pp > 2 else 0
        per_stage = max(lay.first_stage_layers, lay.last_stage_layers, middle)
    micro = lay.global_batch / (lay.dp * lay.micro_batch)
    shaped = [v for v in range(2, layers + 1) if per_stage % v == 0 and micro % lay.pp == 0 and v not in valid]
    target = facts.objectives[OBJECTIVE].variable
    found = []
    for v in shaped:
        option = _with(run, v)
        res = resolver.resolve(target, facts.run_fields.scenario(scenarios, option))
        if res.value is not None:
            found.append(f"{v}: {res.value:.4g}")
    return (f"; rejected only for memory as the model counts activations, interleave {', '.join(found)} {units}"
            if found else "")


def _with(run: RunSpec, interleave: int) -> RunSpec:
    return run.model_copy(update={"layout": run.layout.model_copy(update={"interleave": interleave})})


def split_note(resolver: Resolver, scenarios: ScenarioBuilder, facts: Facts, run: RunSpec) -> str | None:
    """When the layers do not divide over the pipeline stages and the run gives no first and last stage, the
    estimate's even split is a fraction of a layer per stage: say so, with the splits that are whole (equal
    lighter first and last stages, the rest even, as Llama 3 and Megatron's uneven stages do) and the throughput
    each would give."""
    lay, layers = run.layout, run.model.layers
    if lay.pp < 3 or lay.first_stage_layers is not None or layers % lay.pp == 0:
        return None
    target = facts.objectives[OBJECTIVE].variable
    found = []
    for k in range(1, layers // lay.pp + 1):
        middle, rest = divmod(layers - 2 * k, lay.pp - 2)
        if rest or middle < k:
            continue
        option = run.model_copy(update={"layout": lay.model_copy(update={"first_stage_layers": k,
                                                                           "last_stage_layers": k})})
        res = resolver.resolve(target, facts.run_fields.scenario(scenarios, option))
        shown = f" at {res.value:.4g} {resolver.variable(target).units}" if res.value is not None else ""
        found.append(f"{k} + {lay.pp - 2} x {middle} + {k}{shown}")
    whole = f"; whole splits with lighter first and last stages: {'; '.join(found)}" if found else \
        "; no split with equal lighter first and last stages is whole"
    return (f"{layers} layers do not divide over {lay.pp} stages: the estimate splits them evenly, "
            f"{layers / lay.pp:.4g} per stage (set layout.first_stage_layers and last_stage_layers){whole}")
