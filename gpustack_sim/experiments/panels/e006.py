"""E006 Firm grid-responsive inference: an inference fleet over two sites answers a demand-response
dispatch at one of them by power capping, request shedding, request migration to the other site, or all
three. Each replication replays the fleet with the dispatch and without it on the same requests (common
random numbers): the reduction is the difference of the site's metered power, as a share of its draw in
the minute before the signal."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from .base import Capability, MeanSample, Panel, PanelContext, Prepared, ProportionSample, Unresolved
from .common import MEASURED_DATA
from .serving import outcome, replica_params, scenario, trace_key, utility

POWER_RESPONSE = Capability(
    "accelerator_power_response",
    "how accelerator power, clocks and throughput respond to a power cap over time (ramp and settling)")
MECHANISMS = {"power_capping_only": {"cap"}, "request_shedding_only": {"shed"},
              "request_migration_only": {"migrate"}, "firm_grid_response": {"cap", "shed", "migrate"}}
ISOLATED = ("power_capping_only", "request_shedding_only", "request_migration_only")


@dataclass(frozen=True)
class _State:
    params: object
    lengths: dict
    context: int
    scenario: dict


class E006(Panel):
    protocol_id = "E006"
    arms = ("power_capping_only", "request_shedding_only", "request_migration_only", "firm_grid_response")

    def __init__(self):
        self._baseline: tuple = (None, None)

    def prepare(self, ctx: PanelContext) -> Prepared:
        sc, digest = scenario(ctx)
        params, lengths, context = replica_params(ctx, sc["run"])
        assumptions = (
            f"fleet: two sites of {sc['replicas_per_site']} replicas of {sc['run']}, {sc['family']} requests at "
            f"{sc['rate']}/s, {100 * sc['sheddable_share']:.0f}% deferrable; one dispatch of "
            f"{sc['event']['duration_s']} s "
            f"at site 0 per replication, bid {100 * sc['bid_share']:.0f}% of the site's draw in the minute before",
            "delivered reduction: each minute of the dispatch, the mean of (baseline - metered) site power over the "
            "pre-signal draw; the firm response of a replication is its smallest minute; the controller meters the "
            "site every second and acts at the next second",
            "power response: a cap takes effect at the next control tick (1 s); the GPU's own settling after a cap "
            "change is not modelled (no component measurement of it)",
            "time to 90% of the bid: censored at the dispatch's duration when never reached",
        )
        return Prepared(_State(params, lengths, context, sc), assumptions,
                        ((digest, "experiments/serving/e006.yaml"),))

    def replay(self, state: _State, arm: str, seed: int) -> dict:
        from ...datacenter.serving.api import draw_requests
        from ...datacenter.serving.control import Controller, GridEvent
        from ...datacenter.serving.fleet import SiteLink, replay
        from ...datacenter.serving.workloads import load_family

        sc = state.scenario
        family = load_family(sc["family"])
        reqs = draw_requests(family, float(sc["rate"]), float(sc["horizon_s"]), state.lengths, None, state.context,
                             np.random.SeedSequence(seed), float(sc["sheddable_share"]))
        replicas = [(state.params, s) for s in (0, 1) for _ in range(int(sc["replicas_per_site"]))]
        links = {(0, 1): SiteLink(float(sc["link"]["bandwidth_bit_s"]), float(sc["link"]["latency_s"]))}
        start, dur = float(sc["event"]["start_s"]), float(sc["event"]["duration_s"])
        event = GridEvent(0, start, start + dur, float(sc["bid_share"]))
        kw = dict(tick_s=float(sc["tick_s"]), links=links, n_sites=2)
        # The runner replays a replication's arms one after another: their common baseline is replayed once.
        if self._baseline[0] != (seed, id(state)):
            self._baseline = ((seed, id(state)), replay(replicas, reqs, float(sc["horizon_s"]),
                                                        controller=Controller(), **kw))
        base = self._baseline[1]
        ctrl = Controller(grid=frozenset(MECHANISMS[arm]), name=arm)
        ev = replay(replicas, reqs, float(sc["horizon_s"]), controller=ctrl, events=(event,), **kw)
        return {"failure_times_ns": trace_key(reqs), **_event_metrics(base, ev, start, dur, float(sc["bid_share"]))}

    def metrics(self, state: _State, observations: Mapping[str, Sequence[dict]]) -> dict:
        cand = observations["firm_grid_response"]
        note = ("per replication: the candidate's firm response over the largest of the three single mechanisms' "
                "on the same requests",)
        best = [max(observations[a][i]["firm_share"] for a in ISOLATED) for i in range(len(cand))]
        ratio = tuple(c["firm_share"] / b if b > 0 else float("inf") for c, b in zip(cand, best))
        mean = lambda key, unit="1": MeanSample(tuple(o[key] for o in cand), unit)  # noqa: E731
        return {
            "firm_response_share": mean("firm_share"),
            "response_vs_best_isolated": MeanSample(ratio, "1", note),
            "delivery_probability": ProportionSample(sum(o["delivered"] for o in cand), len(cand)),
            "time_to_90pct_of_bid": mean("t90_s", "s"),
            "sustained_duration": mean("sustained_s", "s"),
            "ttft_slo_decline": mean("ttft_decline"),
            "tpot_slo_decline": mean("tpot_decline"),
            "p99_latency_ratio": mean("p99_ratio"),
            "utility_decline": mean("utility_decline"),
            "rebound": mean("rebound"),
        }

    def observed(self, observations_dir, metric_names):
        return {n: Unresolved((MEASURED_DATA,)) for n in metric_names}


def _event_metrics(base, ev, start: float, dur: float, bid: float) -> dict:
    tick = base.tick_s
    pb, pe = base.site_power_w[:, 0], ev.site_power_w[:, 0]
    k0, k1 = int(start / tick), int((start + dur) / tick)
    before = float(pb[max(0, k0 - int(60 / tick)):k0].mean())
    red = (pb - pe) / before
    minute = int(60 / tick)
    minutes = [float(red[k:k + minute].mean()) for k in range(k0, k1 - minute + 1, minute)]
    firm = min(minutes)
    reached = np.nonzero(red[k0:k1] >= 0.9 * bid)[0]
    t90 = float(reached[0] + 1) * tick if len(reached) else dur
    # Longest stretch over which the one-minute mean reduction holds the bid.
    rolling = np.convolve(red[k0:k1], np.ones(minute) / minute, mode="valid") >= bid
    best = run = 0
    for ok in rolling:
        run = run + 1 if ok else 0
        best = max(best, run)
    sustained = (best + minute - 1) * tick if best else 0.0
    ob, oe = outcome(base), outcome(ev)
    inside = (ob.arrival_s >= start) & (ob.arrival_s < start + dur)
    ttft_decline = float(ob.ttft_ok[inside].mean() - oe.ttft_ok[inside].mean()) if inside.any() else 0.0
    tpot_decline = float(ob.tpot_ok[inside].mean() - oe.tpot_ok[inside].mean()) if inside.any() else 0.0
    p99 = float(max(np.percentile(oe.ttft_ratio[inside], 99), np.percentile(oe.tpot_ratio[inside], 99))) \
        if inside.any() else 0.0
    ub, ue = utility(ob), utility(oe)
    curtailed = float(np.clip(pb[k0:k1] - pe[k0:k1], 0, None).sum() * tick)
    rebound = float(np.clip(pe[k1:] - pb[k1:], 0, None).sum() * tick)
    return {"firm_share": firm, "delivered": bool(firm >= bid and sustained >= dur - tick), "t90_s": t90,
            "sustained_s": float(sustained), "ttft_decline": ttft_decline, "tpot_decline": tpot_decline,
            "p99_ratio": min(p99, 1e6), "utility_decline": 1 - ue / ub if ub > 0 else 0.0,
            "rebound": rebound / curtailed if curtailed > 0 else 0.0}
