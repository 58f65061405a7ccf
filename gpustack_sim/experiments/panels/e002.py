"""E002 Shape the power waveform: periodic checkpoints at Daly's interval against checkpoint timing chosen
to shape the rack's power draw, on the same failure traces.

What the virtual datacenter computes: time_to_target_regression (wallclock to the token budget,
candidate / baseline - 1, per replication). The waveform metrics (danger-band spectral energy,
admission capacity) need a per-site power series at sub-step resolution and the node power during
checkpoint blocking and recovery; the replay reports energy per phase and the catalog has no power for
those phases, so they are unresolved. The invariant count needs the site power-cap invariant, which
needs the same series: unresolved, with the invariants the replay does check reported in its notes.
NRMSE and coverage against held-out measured waveforms are real-stage metrics (deferred)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ...datacenter import SimulationResult, simulate
from ...datacenter.policies import FixedInterval, daly_interval
from .base import MeanSample, Panel, PanelContext, Prepared, Unresolved
from .common import PHASE_POWER, POWER_SERIES, calibration_ids, load_training, scenario_value


@dataclass(frozen=True)
class _State:
    params: object
    daly_s: float
    shaped_s: float


def power_series_available() -> bool:
    """Whether this version of the datacenter reports a power series (a capability probe, not a guess)."""
    return any(f in getattr(SimulationResult, "__dataclass_fields__", {}) for f in ("power_series", "power"))


class E002(Panel):
    protocol_id = "E002"
    arms = ("periodic_checkpoints", "shaped_checkpoints")

    def prepare(self, ctx: PanelContext) -> Prepared:
        run, params = load_training(ctx)
        factor = scenario_value(ctx, "shaped_interval_factor", float)
        daly = daly_interval(params.checkpoint_blocking_s, params.job_mtbf_s)
        state = _State(params, daly, daly * factor)
        assumptions = (
            f"baseline: checkpoints every {daly:.4g} s (Daly's interval from the catalog's MTBF and blocking time); "
            f"candidate: every {state.shaped_s:.4g} s ({factor:g} x Daly), halving the rate of the checkpoint "
            "power dips",
            "the replay's decision epochs are the start and each recovery: the interval is fixed per arm",
            "time to target is the wallclock to the token budget (the same tokens in every arm)",
        )
        return Prepared(state, assumptions, calibration_ids(ctx, run))

    def replay(self, state: _State, arm: str, seed: int) -> dict:
        interval = state.daly_s if arm == "periodic_checkpoints" else state.shaped_s
        p = state.params
        result = simulate(p, policy=FixedInterval(interval), seed=seed, replications=1)
        return {"wallclock_s": result.figures["wallclock_s"].mean,
                "unbalanced": result.work["unbalanced_replications"],
                "budget_missed": int(result.tokens_min != p.token_budget),
                "failure_times_ns": result.failure_times_ns[0]}

    def metrics(self, state: _State, obs: Mapping[str, Sequence[dict]]) -> dict:
        base, cand = obs["periodic_checkpoints"], obs["shaped_checkpoints"]
        regression = tuple(c["wallclock_s"] / b["wallclock_s"] - 1 for b, c in zip(base, cand))
        broken = sum(o["unbalanced"] + o["budget_missed"] for arm in obs.values() for o in arm)
        checked = sum(len(arm) for arm in obs.values())
        waveform = (POWER_SERIES, PHASE_POWER)
        note = () if not power_series_available() else (
            "this datacenter reports a power series, but the panel's spectral analysis of it is not written yet",)
        return {
            "danger_band_energy_reduction": Unresolved(waveform, note),
            "time_to_target_regression": MeanSample(regression, "1"),
            "admission_capacity_gain": Unresolved(waveform, note),
            "invariant_violations": Unresolved(
                (POWER_SERIES,),
                (f"work conservation and the exact token budget were checked in {checked} replays "
                 f"({broken} broken); the site power-cap invariant needs the power series",)),
        }
