"""E004 Fluid inference topology: should an inference fleet move requests while serving them? Per workload
family, each replication replays on the same requests (common random numbers): the fleet in each static
topology (every replica one layout), a mixed fleet under independent controllers (KV-aware routing and
autoscaling, no migration), and the mixed fleet under one controller that also migrates in-flight requests
with their KV caches; the factorial parts (migration alone, neither) give the interaction."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from .base import MeanSample, Panel, PanelContext, Prepared, Unresolved
from .common import MEASURED_DATA
from .serving import outcome, replica_params, scenario, trace_key, utility

WORKLOAD_NOTE = "workload families: experiments/serving/e004.yaml (chat and code from the Azure 2023 traces)"


@dataclass(frozen=True)
class _State:
    topologies: dict  # name -> ReplicaParameters
    lengths: dict
    context: int
    scenario: dict


class E004(Panel):
    protocol_id = "E004"
    arms = ("best_static_topology", "independent_controllers", "fluid_topology")

    def prepare(self, ctx: PanelContext) -> Prepared:
        sc, digest = scenario(ctx)
        topologies, lengths, context = {}, None, None
        for name, layout in sc["topologies"].items():
            overrides = tuple(f"layout.{k}={v}" for k, v in layout.items())
            params, lengths, context = replica_params(ctx, sc["run"], overrides)
            topologies[name] = params
        assumptions = (
            f"fleet of {sc['gpus']} GPUs serving {sc['run']}: static topologies "
            + ", ".join(f"{n} ({sc['gpus'] // p.gpus_per_replica} replicas)" for n, p in topologies.items())
            + "; the controlled fleets mix " + ", ".join(f"{k} x{v}" for k, v in sc["mixed"].items()),
            f"{sc['horizon_s']} s per family and replication; utility: output tokens of requests meeting both "
            "objectives per joule of facility energy; the best static topology is chosen per replication and "
            "family in hindsight",
            f"regime crossing: the best static topology per {sc['window_s']} s window changes within the trace; "
            "the oracle takes the best static topology in every window",
            "gains are means over the families of per-family utility ratios; utility regression and SLO decline "
            "are the worst family's",
            WORKLOAD_NOTE,
        )
        return Prepared(_State(topologies, lengths, context, sc), assumptions,
                        ((digest, "experiments/serving/e004.yaml"),))

    def replay(self, state: _State, arm: str, seed: int) -> dict:
        from ...datacenter.serving.api import draw_requests
        from ...datacenter.serving.control import Controller
        from ...datacenter.serving.fleet import replay
        from ...datacenter.serving.workloads import load_family

        sc = state.scenario
        horizon, tick, window = float(sc["horizon_s"]), float(sc["tick_s"]), float(sc["window_s"])
        mixed = [(state.topologies[name], 0) for name, count in sc["mixed"].items() for _ in range(int(count))]
        per_family, key = {}, ()
        for k, (fam_name, spec) in enumerate(sorted(sc["families"].items())):
            family = load_family(spec["family"])
            reqs = draw_requests(family, float(spec["rate"]), horizon, state.lengths, None, state.context,
                                 np.random.SeedSequence([seed, k]))
            key += trace_key(reqs)[:2]

            def run(replicas, routing="least_loaded", **ctrl):
                o = outcome(replay(replicas, reqs, horizon, routing=routing, controller=Controller(**ctrl),
                                   tick_s=tick))
                wins = [(utility(o, a, a + window), _window(o, a, a + window)) for a in np.arange(0, horizon, window)]
                return {"u": utility(o), "slo": float((o.good_tokens > 0).mean()) if len(o.good_tokens) else 0.0,
                        "windows": [w for _, w in wins]}

            if arm == "best_static_topology":
                per_family[fam_name] = {n: run([(p, 0)] * (int(sc["gpus"]) // p.gpus_per_replica))
                                        for n, p in state.topologies.items()}
            elif arm == "independent_controllers":
                per_family[fam_name] = {"joint": run(mixed, "kv_aware", autoscale=True)}
            else:
                per_family[fam_name] = {"joint": run(mixed, "kv_aware", autoscale=True, migrate=True),
                                        "migration_only": run(mixed, migrate=True),
                                        "neither": run(mixed)}
        return {"failure_times_ns": key, "families": per_family}

    def metrics(self, state: _State, observations: Mapping[str, Sequence[dict]]) -> dict:
        static, indep, fluid = (observations[a] for a in self.arms)
        gain_s, gain_i, inter, cross, dominated, regression, slo, regret = ([] for _ in range(8))
        for s, i, f in zip(static, indep, fluid):
            fams = sorted(f["families"])
            gs, gi, ie, rg, sd, rt = [], [], [], [], [], []
            crossing = dominated_n = 0
            for fam in fams:
                topo = s["families"][fam]
                best_name = max(topo, key=lambda n: topo[n]["u"])
                best = topo[best_name]
                joint = f["families"][fam]["joint"]
                mig = f["families"][fam]["migration_only"]
                neither = f["families"][fam]["neither"]
                ind = i["families"][fam]["joint"]
                gs.append(_ratio(joint["u"], best["u"]) - 1)
                gi.append(_ratio(joint["u"], ind["u"]) - 1)
                ie.append(_ratio(joint["u"] - mig["u"] - ind["u"] + neither["u"], neither["u"]))
                rg.append(1 - _ratio(joint["u"], best["u"]))
                sd.append(best["slo"] - joint["slo"])
                dominated_n += best["u"] > joint["u"]
                wins = list(zip(*(topo[n]["windows"] for n in sorted(topo))))
                choice = [int(np.argmax([w[0] / w[1] if w[1] > 0 else 0.0 for w in ws])) for ws in wins]
                crossing += len(set(choice)) > 1
                oracle_tokens = sum(ws[c][0] for ws, c in zip(wins, choice))
                oracle_energy = sum(ws[c][1] for ws, c in zip(wins, choice))
                rt.append(1 - _ratio(joint["u"], oracle_tokens / oracle_energy if oracle_energy else 0.0))
            gain_s.append(float(np.mean(gs)))
            gain_i.append(float(np.mean(gi)))
            inter.append(float(np.mean(ie)))
            cross.append(float(crossing))
            dominated.append(float(dominated_n))
            regression.append(float(max(rg)))
            slo.append(float(max(sd)))
            regret.append(float(np.mean(rt)))
        m = lambda v, note=(): MeanSample(tuple(v), "1", tuple(note))  # noqa: E731
        return {
            "utility_gain_vs_static": m(gain_s),
            "utility_gain_vs_independent": m(gain_i),
            "interaction_effect": m(inter, ("joint - migration alone - routing and autoscaling alone + neither, "
                                             "over neither (the mixed fleet with least-loaded routing)",)),
            "regime_crossing_families": m(cross),
            "static_dominated_families": m(dominated),
            "utility_regression": m(regression),
            "slo_decline": m(slo),
            "regret_vs_oracle": m(regret),
            "interval_coverage_90": Unresolved((MEASURED_DATA,), ("measured serving runs (stage real)",)),
        }

    def observed(self, observations_dir, metric_names):
        return {n: Unresolved((MEASURED_DATA,)) for n in metric_names}


def _window(o, t0: float, t1: float) -> tuple[float, float]:
    """(SLO-attaining tokens finished, joules drawn) in [t0, t1)."""
    k0, k1 = int(t0 / o.tick_s), int(np.ceil(t1 / o.tick_s))
    return (float(o.good_tokens[(o.finish_s >= t0) & (o.finish_s < t1)].sum()),
            float(o.energy_per_tick_j[k0:k1].sum()))


def _ratio(a: float, b: float) -> float:
    return a / b if b > 0 else 0.0
