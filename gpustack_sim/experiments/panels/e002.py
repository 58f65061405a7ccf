"""E002 Shape the power waveform: periodic checkpoints at Daly's interval against checkpoint timing chosen
to shape the rack's power draw, on the same failure traces.

Each replication of each arm is replayed to the token budget; its site's node power series (every phase at
its catalog node power: steps, checkpoint snapshots, recovery) is sampled at 0.1 s over the analysis window
and analysed there:
- danger_band_energy_reduction: 1 - (band energy, candidate) / (band energy, baseline), the band energy being
  the series' variance in the protocol's danger band from Welch's power spectral density;
- admission_capacity_gain: the site's cap is set at the baseline's peak draw (the scenario names no site, so
  the site is taken as provisioned for the baseline); the candidate's extra admissible load is the
  baseline's peak less its own, as a share of the baseline's;
- invariant_violations: per replication pair, broken work conservation, a missed token budget, and the
  candidate's draw above that cap;
- time_to_target_regression: wallclock to the token budget, candidate / baseline - 1.
NRMSE and coverage against held-out measured waveforms are real-stage metrics (deferred)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gpustack_compiler.base.errors import InputError
from gpustack_compiler.language.models import parse_quantity

from ...datacenter import simulate
from ...datacenter.policies import FixedInterval, daly_interval
from ...datacenter.spectrum import band_energy
from .base import MeanSample, Panel, PanelContext, Prepared
from .common import calibration_ids, load_training, scenario_value

# 0.1 s bins sample up to 5 Hz, above the danger band's 2 Hz edge; a whole 24-day replication at this
# resolution is 21 million bins per arm, so the analysis covers the first day of each replication.
RESOLUTION_S = 0.1
WINDOW_S = 86400.0
# Welch segments: 600 s resolves the band's 0.1 Hz lower edge in steps of 1/600 Hz.
SEGMENT_S = 600.0


@dataclass(frozen=True)
class _State:
    params: object
    daly_s: float
    shaped_s: float
    band_hz: tuple[float, float]


def danger_band(ctx: PanelContext) -> tuple[float, float]:
    """The protocol's frozen danger band (independent variable `danger_band`: lower and upper edge), in Hz."""
    var = next((v for v in ctx.protocol.spec.independent_variables if v.name == "danger_band"), None)
    if var is None or len(var.values) != 2:
        raise InputError(f"{ctx.protocol.path}: independent_variables.danger_band: two edges required by panel "
                         f"{ctx.protocol.spec.id}")
    units = ctx.engine.units
    edges = []
    for value in var.values:
        try:
            q = parse_quantity(value, "Hz")
            unit = units.parse(q.units)
        except ValueError as exc:
            raise InputError(f"{ctx.protocol.path}: independent_variables.danger_band: {exc}") from None
        if unit.dim != units.parse("Hz").dim:
            raise InputError(f"{ctx.protocol.path}: independent_variables.danger_band: {value!r} is not a frequency")
        edges.append(q.value * unit.scale)
    return edges[0], edges[1]


class E002(Panel):
    protocol_id = "E002"
    arms = ("periodic_checkpoints", "shaped_checkpoints")

    def prepare(self, ctx: PanelContext) -> Prepared:
        run, params = load_training(ctx)
        undefined = [name for name, watts in (("checkpoint", params.node_power_checkpoint_w),
                                               ("recovery", params.node_power_recovery_w),
                                               ("steps", params.node_power_compute_w)) if watts is None]
        if undefined:
            raise InputError(f"{ctx.protocol.spec.scenario.run}: no catalog node power for {', '.join(undefined)}: "
                             "E002's power series needs every phase's")
        factor = scenario_value(ctx, "shaped_interval_factor", float)
        daly = daly_interval(params.checkpoint_blocking_s, params.job_mtbf_s)
        state = _State(params, daly, daly * factor, danger_band(ctx))
        lo, hi = state.band_hz
        assumptions = (
            f"baseline: checkpoints every {daly:.4g} s (Daly's interval from the catalog's MTBF and blocking time); "
            f"candidate: every {state.shaped_s:.4g} s ({factor:g} x Daly), halving the rate of the checkpoint "
            "power dips",
            "the replay's decision epochs are the start and each recovery: the interval is fixed per arm",
            "time to target is the wallclock to the token budget (the same tokens in every arm)",
            f"node power per phase from the catalog: steps {params.node_power_compute_w:.0f} W, checkpoint snapshot "
            f"{params.node_power_checkpoint_w:.0f} W, recovery {params.node_power_recovery_w:.0f} W per node; within "
            "a step the power is its measured average (no compute/communication waveform inside a step)",
            f"spectral analysis of the site's node power over each replication's first {WINDOW_S / 3600:g} h at "
            f"{RESOLUTION_S:g} s: Welch's method (SciPy; Hann segments of {SEGMENT_S:g} s, half overlapping), "
            f"band {lo:g}-{hi:g} Hz; the rack's power is the site's over its racks, so the ratio is the same",
            "admission capacity: the site's cap is the baseline's peak draw in the window (no site file gives one); "
            "the candidate admits the baseline's peak less its own, as a share of the baseline's",
        )
        return Prepared(state, assumptions, calibration_ids(ctx, run))

    def replay(self, state: _State, arm: str, seed: int) -> dict:
        interval = state.daly_s if arm == "periodic_checkpoints" else state.shaped_s
        p = state.params
        result = simulate(p, policy=FixedInterval(interval), seed=seed, replications=1)
        end = min(WINDOW_S, result.figures["wallclock_s"].mean)
        series = result.power_series(result.sites[0], RESOLUTION_S, (0.0, end)).total_w
        full = series[:-1] if len(series) > 1 else series  # the last bin may be shorter: its mean is not comparable
        return {"wallclock_s": result.figures["wallclock_s"].mean,
                "unbalanced": result.work["unbalanced_replications"],
                "budget_missed": int(result.tokens_min != p.token_budget),
                "failure_times_ns": result.failure_times_ns[0],
                "band_energy_w2": band_energy(full, RESOLUTION_S, state.band_hz, SEGMENT_S),
                "peak_w": float(full.max())}

    def metrics(self, state: _State, obs: Mapping[str, Sequence[dict]]) -> dict:
        base, cand = obs["periodic_checkpoints"], obs["shaped_checkpoints"]
        regression = tuple(c["wallclock_s"] / b["wallclock_s"] - 1 for b, c in zip(base, cand))
        reduction = tuple(1 - c["band_energy_w2"] / b["band_energy_w2"] for b, c in zip(base, cand))
        gain = tuple((b["peak_w"] - c["peak_w"]) / b["peak_w"] for b, c in zip(base, cand))
        broken = tuple(b["unbalanced"] + c["unbalanced"] + b["budget_missed"] + c["budget_missed"]
                       + int(c["peak_w"] > b["peak_w"] * (1 + 1e-12)) for b, c in zip(base, cand))
        return {
            "danger_band_energy_reduction": MeanSample(reduction, "1"),
            "time_to_target_regression": MeanSample(regression, "1"),
            "admission_capacity_gain": MeanSample(
                gain, "1", ("the checkpoint dips lower the draw; neither arm's peak (every node stepping) moves",)),
            "invariant_violations": MeanSample(
                tuple(float(v) for v in broken), "1",
                ("work conservation, the exact token budget (both arms) and the candidate's draw under the cap "
                 "set at the baseline's peak, per replication pair",)),
        }
