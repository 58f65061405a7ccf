"""Helpers shared by the panels that replay a training run in the virtual datacenter."""

from __future__ import annotations

from gpustack_compiler.base.errors import InputError

from .base import Capability, PanelContext

# Capabilities the system lacks, named once so every artifact spells them the same way.
LEARNING_MODEL = Capability(
    "learning_efficiency_model",
    "a model of learning progress (loss or quality reached) as a function of the training dynamics: local "
    "steps, synchronisation cadence, lost, repeated or corrupted steps; the catalog and the datacenter model "
    "time, power and failures, not learning")
INFERENCE_SERVING = Capability(
    "inference_serving_simulation",
    "an inference fleet in the virtual datacenter: request arrivals, batching, KV-cache memory, routing and "
    "migration of requests, TTFT/TPOT latency and SLOs")
GRID_EVENTS = Capability(
    "grid_signal_response",
    "grid signals (bids, dispatch, curtailment) acted on inside the replay, with the fleet's power response "
    "over time (the event kind exists, nothing emits or handles it)")
MEASURED_DATA = Capability(
    "measured_observations",
    "measured observations from real systems in data/observations (none are held for this protocol)")


def scenario_value(ctx: PanelContext, name: str, kind: type):
    params = ctx.protocol.spec.scenario.parameters
    if name not in params:
        raise InputError(f"{ctx.protocol.path}: scenario.parameters.{name}: required by panel "
                         f"{ctx.protocol.spec.id}")
    value = params[name]
    if kind is int and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise InputError(f"{ctx.protocol.path}: scenario.parameters.{name}: {value!r} is not a positive integer")
    if kind is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise InputError(f"{ctx.protocol.path}: scenario.parameters.{name}: {value!r} is not a positive number")
        value = float(value)
    return value


def scenario_file(ctx: PanelContext, key: str):
    rel = getattr(ctx.protocol.spec.scenario, key)
    if rel is None:
        raise InputError(f"{ctx.protocol.path}: scenario.{key}: required by panel {ctx.protocol.spec.id}")
    path = ctx.path(rel)
    if not path.is_file():
        raise InputError(f"{ctx.protocol.path}: scenario.{key}: {rel} not found under {ctx.root.name or ctx.root}")
    return path


def calibration_ids(ctx: PanelContext, run) -> tuple[tuple[str, str], ...]:
    """The data fitted into the run's scenario: every fitted preset it uses, by the hash of its data and by
    the id of each observation it was fitted to (the ids `gpustack validate` refuses to score)."""
    out = []
    presets = ctx.engine.tables.presets
    for name in [*run.hardware, *run.presets]:
        p = presets.get(name) or {}
        fit = p.get("fit") or {}
        if p.get("provenance") == "fitted" and fit.get("data_sha256"):
            out.append((f"sha256:{fit['data_sha256']}",
                        f"preset {name}: fitted to {', '.join(fit.get('data', []))}"))
            out += [(f"observation:{i}", f"preset {name}: fitted to observation {i}")
                    for i in fit.get("observations") or []]
    return tuple(sorted(out))


def load_training(ctx: PanelContext):
    """The run file and its JobParameters from the catalog."""
    path = scenario_file(ctx, "run")
    run = ctx.engine.load_run(path)
    params, _ = ctx.engine.job_parameters(run)
    return run, params
