"""E001 Beyond one datacenter: one job across several sites joined by WAN links, synchronising weights
synchronously (every step), every H local steps, or at a cadence an adaptive controller sets.

What the virtual datacenter computes (multi-site replays from the protocol's sites file, the same
failure trace for every arm of a replication):
- completion_time_ratio: wallclock to the token budget, candidate / synchronous, per replication;
- collective_payload_byte_fraction: cross-site (WAN) payload bytes, candidate / synchronous: each
  synchronisation passes the weights along the chain of sites (the datacenter's model), and the
  synchronisations of work later rolled back count, since their bytes were sent;
- the same two for the fixed-local-steps baseline (secondary);
- progress_per_flop_ratio: each replication's cadence (the local steps in force over most of its steps) and lost
  work (rolled-back share of its steps) through the catalog's learning model (panels/learning.py), candidate
  over synchronous. The learning model is calibrated on a local small model: outside the territory that
  calibration measured (H, K, share of steps lost to rollbacks) the controller abstains and falls back to the
  synchronous cadence, and a replication whose lost work lies outside it is not scored; both are counted in the
  artifact.
At the real stage (`observed`) progress per FLOP comes from measured loss curves (measured_learning.py)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ...datacenter import simulate
from ...datacenter.events import NS_PER_S
from ...datacenter.policies import Observation, SetCheckpointInterval, SetSyncCadence, daly_interval
from ...datacenter.sites import load_sites, place
from .base import Capability, MeanSample, Panel, PanelContext, Prepared, Unresolved, paired
from .common import calibration_ids, load_training, scenario_file, scenario_value
from .learning import HONESTY, LEARNING_CALIBRATION, LearningModel
from .measured_learning import PROGRESS_SERIES, clean, progress_per_flop

MULTI_SITE = Capability(
    "measured_multi_site_runs",
    "measured runs across sites joined by WAN links (wallclock to the token budget, WAN bytes); the local learning "
    "workload trains simulated replicas on one machine")
MEASURED_HONESTY = ("measured on the local learning workload (a small model on this machine's CPUs, simulated "
                    "replicas): no claim of transfer to frontier-scale or multi-site training")


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
    # Local steps and replicas the learning calibration measured; None: no calibration, so every cadence but
    # the synchronous one is outside what is known.
    territory_h: tuple[float, float] | None = None
    outside_k: tuple[str, ...] = ()  # why the replica count is outside the measured territory
    name: str = "adaptive_cadence"
    trajectory: list[int] = field(default_factory=list)
    steps_at: list[int] = field(default_factory=list)  # steps completed at each decision
    abstentions: list[str] = field(default_factory=list)

    def _abstain(self, proposed: int) -> str | None:
        if proposed == 1:
            return None
        if self.territory_h is None:
            return f"H = {proposed}: no learning calibration to judge any cadence by"
        if self.outside_k:
            return f"H = {proposed}: {self.outside_k[0]}"
        lo, hi = self.territory_h
        if not lo <= proposed <= hi:
            return f"H = {proposed} is outside the measured local steps [{lo:g}, {hi:g}]"
        return None

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
        reason = self._abstain(new)
        if reason is not None:
            # Outside what the learning model was calibrated on: no guess, the baseline's cadence.
            self.abstentions.append(f"at {obs.elapsed_s:.6g} s: {reason}; fell back to the synchronous cadence")
            new = 1
        if new != self.local_steps or not self.trajectory:
            self.local_steps = new
            actions.append(SetSyncCadence(new))
        self.trajectory.append(new)
        self.steps_at.append(obs.steps_completed)
        return tuple(actions)

    def prevailing(self, total_steps: int) -> int:
        """The local steps in force over most of the steps (the first on a tie)."""
        spans: dict[int, int] = {}
        ends = [*self.steps_at[1:], total_steps]
        for h, a, b in zip(self.trajectory, self.steps_at, ends):
            spans[h] = spans.get(h, 0) + max(b - a, 0)
        return max(spans, key=lambda h: (spans[h], -self.trajectory.index(h))) if spans else self.local_steps


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
    replicas: int  # sites: the replicas that average across the WAN
    territory_h: tuple[float, float] | None
    outside_k: tuple[str, ...]


class E001(Panel):
    protocol_id = "E001"
    arms = ("synchronous", "fixed_local_steps", "adaptive_cadence")

    def prepare(self, ctx: PanelContext) -> Prepared:
        run, params = load_training(ctx)
        engine = ctx.engine
        sites = load_sites(scenario_file(ctx, "sites"), engine.units, set(engine.tables.presets))
        placement = place(sites, params.nodes, params.gpus_per_node, params.model_sync_bits)
        model = LearningModel.from_catalog(engine)
        replicas = len(placement.placed)
        territory_h = outside_k = None
        if model is not None:
            territory_h = model.territory.get("learning.local_steps")
            outside_k = tuple(model.outside(replicas=replicas))
        state = _State(params, sites, replicas - 1, placement.sync_ns / NS_PER_S,
                       scenario_value(ctx, "fixed_local_steps", int),
                       scenario_value(ctx, "adaptive_initial_local_steps", int),
                       scenario_value(ctx, "adaptive_double_at_share", float),
                       scenario_value(ctx, "adaptive_halve_at_share", float),
                       replicas, territory_h, outside_k or ())
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
            f"progress per FLOP: the sites are the {replicas} replicas that average; {HONESTY}",
        )
        return Prepared(state, assumptions, calibration_ids(ctx, run), local=model)

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
                                                    state.double_at, state.halve_at, state.territory_h,
                                                    state.outside_k)
        result = simulate(p, sites=sites, policy=policy, seed=seed, replications=1, log_replications=1)
        syncs = sum(row["count"] for row in result.log if row["kind"] == "state_transfer")
        work = result.work
        return {"wallclock_s": result.figures["wallclock_s"].mean, "syncs": syncs,
                "wan_bytes": syncs * state.hops * p.model_sync_bits / 8,
                "unbalanced": work["unbalanced_replications"],
                "final_local_steps": controller.local_steps if controller else sites.sync_every_steps,
                "local_steps": controller.prevailing(work["attempted_steps"]) if controller
                else sites.sync_every_steps,
                "rollbacks_per_step": result.figures["interruptions"].mean / max(work["attempted_steps"], 1),
                "steps_lost_per_rollback": work["lost_steps"] / max(result.figures["interruptions"].mean, 1),
                "abstentions": tuple(controller.abstentions) if controller else (),
                "failure_times_ns": result.failure_times_ns[0]}

    def observed(self, observations_dir: Path, metric_names: Sequence[str]) -> dict:
        """The real stage on measured loss curves (RV1.<ext>: local learning conditions, their curves beside
        it): progress per FLOP of each candidate cadence (H > 1) over the synchronous one (H = 1) at the same
        replica count, clean conditions only, seed by seed. Wallclock and WAN bytes of a multi-site run are
        not what a local workload measures: those metrics stay unmeasured."""
        path = next(p for p in sorted(observations_dir.iterdir()) if p.is_file() and p.stem == "RV1")
        from ...learning.curves import load_measured

        conditions = load_measured(path, PROGRESS_SERIES)
        out = {name: Unresolved((MULTI_SITE,), (f"{path.name} holds local learning curves: no multi-site wallclock "
                                                "or WAN bytes",)) for name in metric_names}
        out["progress_per_flop_ratio"] = _measured_progress(conditions, path.name)
        return out

    def metrics(self, state: _State, obs: Mapping[str, Sequence[dict]], model: LearningModel | None = None) -> dict:
        final = sorted({o["final_local_steps"] for o in obs["adaptive_cadence"]})
        abstained = [a for o in obs["adaptive_cadence"] for a in o["abstentions"]]
        cadence_note = (f"adaptive cadence ended at {', '.join(map(str, final))} local steps "
                        f"(started at {state.initial_local_steps}); the controller abstained {len(abstained)} "
                        f"time(s) in {sum(bool(o['abstentions']) for o in obs['adaptive_cadence'])} replication(s)"
                        + (f", first: {abstained[0]}" if abstained else ""))
        return {
            "progress_per_flop_ratio": _progress(state, obs, model, cadence_note),
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


def _progress(state: _State, obs: Mapping[str, Sequence[dict]], model: LearningModel | None, cadence_note: str):
    """Candidate over synchronous progress per FLOP, per replication, through the learning model; a
    replication whose lost work (or cadence) lies outside the calibrated territory is not scored, and counted."""
    if model is None:
        return Unresolved((LEARNING_CALIBRATION,), (cadence_note,))
    skipped, pairs = [], []
    for sync, cand in zip(obs["synchronous"], obs["adaptive_cadence"]):
        lost = [o["rollbacks_per_step"] * o["steps_lost_per_rollback"] for o in (sync, cand)]
        reasons = model.outside(replicas=state.replicas, local_steps=cand["local_steps"],
                                **{"fault.lost_share": max(lost)})
        if reasons:
            skipped.append(reasons[0])
        else:
            pairs.append((cand["local_steps"], *lost))
    # Each cadence's model over all replications at once (one integration per node, not per replication).
    base, error = model.progress_at(1, state.replicas, [p[1] for p in pairs]) if pairs else ([], 0.0)
    mine = [0.0] * len(pairs)
    for h in sorted({p[0] for p in pairs}):
        at = [i for i, p in enumerate(pairs) if p[0] == h]
        got, err = model.progress_at(h, state.replicas, [pairs[i][2] for i in at])
        error = max(error, err)
        for i, g in zip(at, got):
            mine[i] = g
    values = [m / b for m, b in zip(mine, base)]
    notes = (cadence_note, HONESTY,
             "the interval is the spread over replications at the fitted learning roots; the roots' own fit "
             "uncertainty (their sds in calibration_learning) is not propagated into it",
             f"{len(skipped)} of {len(obs['synchronous'])} replication(s) not scored: outside the calibrated "
             "territory" + (f" (first: {skipped[0]})" if skipped else ""),
             f"per cadence the model is integrated at Chebyshev nodes of the replications' lost shares and "
             f"interpolated: largest relative error against the model {error:.1e}")
    if not values:
        return Unresolved((LEARNING_CALIBRATION,), notes + ("every replication lies outside the calibrated territory",))
    return MeanSample(tuple(values), "1", notes)


def _measured_progress(conditions, name: str):
    """Candidate over synchronous measured progress per FLOP, per seed both measured, over every candidate
    cadence with a synchronous condition of its replica count; inadmissible conditions are counted, never used."""
    refused = [c for c in conditions if c.inadmissible]
    usable = [c for c in conditions if clean(c) and not c.inadmissible]

    def steps(c):
        return int(c.assign["learning.local_steps"])

    def replicas(c):
        return int(c.assign["learning.replicas"])

    base = {replicas(c): c for c in usable if steps(c) == 1}
    values, pairs = [], []
    for cand in (c for c in usable if steps(c) > 1 and replicas(c) in base):
        sync = base[replicas(cand)]
        mine, theirs = {k.seed: k for k in cand.curves}, {k.seed: k for k in sync.curves}
        for seed in sorted(set(mine) & set(theirs)):
            values.append(progress_per_flop(mine[seed]) / progress_per_flop(theirs[seed]))
        pairs.append(f"{cand.id} over {sync.id}")
    notes = (MEASURED_HONESTY, f"{len(refused)} inadmissible condition(s) set aside"
             + (f" (first: {refused[0].id}: {refused[0].inadmissible})" if refused else ""))
    if not values:
        evidence = "inadmissible" if refused and not usable else "unmeasured"
        return Unresolved((), notes + (f"{name} holds no clean synchronous (H = 1) and candidate (H > 1) "
                                       "conditions of one replica count with common seeds",), evidence)
    return MeanSample(tuple(values), "1", notes + (f"pairs: {'; '.join(pairs)}",), evidence="measured")
