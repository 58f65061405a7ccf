"""E001 Beyond one datacenter: one job across several sites joined by WAN links, synchronising weights
synchronously (every step), every H local steps, or at a cadence an adaptive controller sets.

What the virtual datacenter computes (multi-site replays from the protocol's sites file, the same
failure trace for every arm of a replication):
- completion_time_ratio: wallclock to the token budget, candidate / synchronous, per replication;
- collective_payload_byte_fraction: cross-site (WAN) payload bytes, candidate / synchronous: each
  synchronisation passes the weights along the chain of sites (the datacenter's model), and the
  synchronisations of work later rolled back count, since their bytes were sent;
- the same two for the fixed-local-steps baseline (secondary).
progress_per_flop_ratio needs a learning-efficiency model under local steps: unresolved."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ...datacenter import simulate
from ...datacenter.events import NS_PER_S
from ...datacenter.policies import Observation, SetCheckpointInterval, SetSyncCadence, daly_interval
from ...datacenter.sites import load_sites, place
from .base import MeanSample, Panel, PanelContext, Prepared, Unresolved, paired
from .common import LEARNING_MODEL, calibration_ids, load_training, scenario_file, scenario_value


@dataclass
class CadenceController:
    """The adaptive-cadence rule: double the local steps when the communication share of a step reaches
    `double_at`, halve them (not below 1) when it falls to `halve_at`. The share is what an operator measures:
    (exposed collective time + WAN stall per step) / (step time + WAN stall per step), with the stall of
    one synchronisation spread over the local steps. The checkpoint interval is Daly's, as the baselines'.
    One decision per decision epoch (the start, and the start and end of each recovery). A fresh
    controller per replication: it remembers its own cadence."""

    checkpoint_s: float
    mtbf_s: float
    step_s: float
    exposed_comm_s: float
    stall_s: float
    local_steps: int
    double_at: float
    halve_at: float
    name: str = "adaptive_cadence"
    trajectory: list[int] = field(default_factory=list)

    def share(self, local_steps: int) -> float:
        wan = self.stall_s / local_steps
        return (self.exposed_comm_s + wan) / (self.step_s + wan)

    def decide(self, obs: Observation) -> tuple:
        actions: list = []
        interval = daly_interval(self.checkpoint_s, self.mtbf_s)
        if obs.checkpoint_interval_s != interval:
            actions.append(SetCheckpointInterval(interval))
        share = self.share(self.local_steps)
        new = self.local_steps
        if share >= self.double_at:
            new = self.local_steps * 2
        elif share <= self.halve_at:
            new = max(1, self.local_steps // 2)
        if new != self.local_steps or not self.trajectory:
            self.local_steps = new
            actions.append(SetSyncCadence(new))
        self.trajectory.append(new)
        return tuple(actions)


@dataclass(frozen=True)
class _State:
    params: object
    sites: object
    hops: int
    stall_s: float
    fixed_local_steps: int
    initial_local_steps: int
    double_at: float
    halve_at: float


class E001(Panel):
    protocol_id = "E001"
    arms = ("synchronous", "fixed_local_steps", "adaptive_cadence")

    def prepare(self, ctx: PanelContext) -> Prepared:
        run, params = load_training(ctx)
        engine = ctx.engine
        sites = load_sites(scenario_file(ctx, "sites"), engine.units, set(engine.tables.presets))
        placement = place(sites, params.nodes, params.gpus_per_node, params.model_sync_bits)
        state = _State(params, sites, len(placement.placed) - 1, placement.sync_ns / NS_PER_S,
                       scenario_value(ctx, "fixed_local_steps", int),
                       scenario_value(ctx, "adaptive_initial_local_steps", int),
                       scenario_value(ctx, "adaptive_double_at_share", float),
                       scenario_value(ctx, "adaptive_halve_at_share", float))
        where = ", ".join(f"{s} {n} nodes" for s, n in placement.placed)
        assumptions = (
            f"sites: {where}; one synchronisation stalls the job {state.stall_s:.4g} s (slowest hop: latency + "
            f"weights / bandwidth) and sends the weights ({params.model_sync_bits / 8:.4g} B) over each of "
            f"{state.hops} hop(s)",
            "all arms keep the global batch and the token budget; they differ only in how often the sites "
            "synchronise (the replay's time model: steps at the catalog's throughput plus synchronisation stalls)",
            "the adaptive controller decides at the datacenter's decision epochs only (the start, and the start "
            "and end of each recovery), from the per-step exposed communication and the per-synchronisation stall",
            "failures are the run's fail-stop classes over the nodes of every site; a site or WAN outage inside "
            "the replay is not modelled (links are up throughout)",
        )
        return Prepared(state, assumptions, calibration_ids(ctx, run))

    def replay(self, state: _State, arm: str, seed: int) -> dict:
        p = state.params
        policy = "daly"
        controller = None
        if arm == "synchronous":
            sites = dataclasses.replace(state.sites, sync_every_steps=1)
        elif arm == "fixed_local_steps":
            sites = dataclasses.replace(state.sites, sync_every_steps=state.fixed_local_steps)
        else:
            sites = dataclasses.replace(state.sites, sync_every_steps=state.initial_local_steps)
            controller = policy = CadenceController(p.checkpoint_blocking_s, p.job_mtbf_s, p.step_time_s,
                                                    p.exposed_comm_s, state.stall_s, state.initial_local_steps,
                                                    state.double_at, state.halve_at)
        result = simulate(p, sites=sites, policy=policy, seed=seed, replications=1, log_replications=1)
        syncs = sum(row["count"] for row in result.log if row["kind"] == "state_transfer")
        return {"wallclock_s": result.figures["wallclock_s"].mean, "syncs": syncs,
                "wan_bytes": syncs * state.hops * p.model_sync_bits / 8,
                "unbalanced": result.work["unbalanced_replications"],
                "final_local_steps": controller.local_steps if controller else sites.sync_every_steps,
                "failure_times_ns": result.failure_times_ns[0]}

    def metrics(self, state: _State, obs: Mapping[str, Sequence[dict]]) -> dict:
        final = sorted({o["final_local_steps"] for o in obs["adaptive_cadence"]})
        cadence_note = (f"adaptive cadence ended at {', '.join(map(str, final))} local steps "
                        f"(started at {state.initial_local_steps})")
        return {
            "progress_per_flop_ratio": Unresolved((LEARNING_MODEL,)),
            "completion_time_ratio": MeanSample(paired(obs, "adaptive_cadence", "synchronous", "wallclock_s"), "1",
                                                (cadence_note,)),
            "collective_payload_byte_fraction": MeanSample(
                paired(obs, "adaptive_cadence", "synchronous", "wan_bytes"), "1", (cadence_note,)),
            "fixed_local_steps_completion_time_ratio": MeanSample(
                paired(obs, "fixed_local_steps", "synchronous", "wallclock_s"), "1"),
            "fixed_local_steps_payload_byte_fraction": MeanSample(
                paired(obs, "fixed_local_steps", "synchronous", "wan_bytes"), "1"),
            "synchronous_wallclock": MeanSample(tuple(o["wallclock_s"] for o in obs["synchronous"]), "s"),
        }
