"""E002 Shape the power waveform: periodic checkpoints at Daly's interval against checkpoint timing chosen
to shape the rack's power draw, on the same failure traces.

What the virtual datacenter computes: time_to_target_regression (wallclock to the token budget,
candidate / baseline - 1, per replication). The waveform metrics (danger-band spectral energy,
admission capacity) need a per-site power series and the node power during checkpoint blocking and
recovery. The panel probes the datacenter (one replay) for a power series: without one, both are named
missing; with one, the series is undefined wherever a checkpoint blocks (the catalog has no power for
that phase, the very phase the candidate shapes), and the spectral analysis is not written yet. The
invariant count needs the site power-cap invariant, which needs the same series: unresolved, with the
invariants the replay does check reported in its notes.
NRMSE and coverage against held-out measured waveforms are real-stage metrics (deferred)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ...datacenter import SimulationResult, simulate
from ...datacenter.policies import FixedInterval, daly_interval
from .base import Capability, MeanSample, Panel, PanelContext, Prepared, Unresolved
from .common import PHASE_POWER, POWER_SERIES, calibration_ids, load_training, scenario_value


SPECTRAL_ANALYSIS = Capability(
    "danger_band_spectral_analysis",
    "the panel's spectral analysis of the per-site power series (danger-band energy, admissible load under the "
    "cap), not written yet")
PROBE_WINDOW_S = 3600.0


@dataclass(frozen=True)
class _State:
    params: object
    daly_s: float
    shaped_s: float
    undefined_phases: tuple[str, ...] | None  # phases the datacenter's power series leaves undefined; None: no series


def probe_power_series(params, interval_s: float) -> tuple[str, ...] | None:
    """A capability probe, not a guess: does this datacenter report a per-site power series, and which phases
    does it leave undefined (no catalog node power)? One replay of the first hour, at 1 s resolution."""
    if not callable(getattr(SimulationResult, "power_series", None)):
        return None
    result = simulate(params, policy=FixedInterval(interval_s), seed=0, replications=1)
    end = min(PROBE_WINDOW_S, result.figures["wallclock_s"].mean)
    series = result.power_series(result.sites[0], 1.0, (0.0, end))
    return tuple(series.undefined)


class E002(Panel):
    protocol_id = "E002"
    arms = ("periodic_checkpoints", "shaped_checkpoints")

    def prepare(self, ctx: PanelContext) -> Prepared:
        run, params = load_training(ctx)
        factor = scenario_value(ctx, "shaped_interval_factor", float)
        daly = daly_interval(params.checkpoint_blocking_s, params.job_mtbf_s)
        state = _State(params, daly, daly * factor, probe_power_series(params, daly))
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
        if state.undefined_phases is None:
            waveform, series, note = (POWER_SERIES, PHASE_POWER), (POWER_SERIES,), ()
        elif "checkpoint" in state.undefined_phases:
            waveform, series = (PHASE_POWER, SPECTRAL_ANALYSIS), (SPECTRAL_ANALYSIS,)
            note = ("the datacenter's power series is undefined (NaN) wherever a checkpoint blocks: the phase the "
                    "candidate shapes has no catalog node power",)
        else:
            waveform, series, note = (SPECTRAL_ANALYSIS,), (SPECTRAL_ANALYSIS,), ()
        return {
            "danger_band_energy_reduction": Unresolved(waveform, note),
            "time_to_target_regression": MeanSample(regression, "1"),
            "admission_capacity_gain": Unresolved(waveform, note),
            "invariant_violations": Unresolved(
                series,
                (f"work conservation and the exact token budget were checked in {checked} replays "
                 f"({broken} broken); the site power-cap invariant needs the power series and its analysis",)),
        }
