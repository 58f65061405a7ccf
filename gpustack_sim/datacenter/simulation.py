"""One replication of a training job: steps, checkpoints, failures, recovery and power.

The job's own progress is never stepped one event per training step. Between two world events (a
failure, the end of a recovery, the horizon) the job follows a fixed pattern (k steps, a checkpoint,
k steps, ...), so where it stands at any instant is found in closed form (a binary search over step
positions); only world events go through the event queue. A replay costs O(failures), not O(steps).

Model (docs/datacenter.md has the full list of assumptions):
- Fail-stop: any failure of a part the job depends on stops every rank. Each failure class is an
  independent Poisson process in wall-clock time over the parts the job holds, running whatever the job
  is doing (so, as in Daly's model, a failure during recovery starts the recovery again).
- Recovery lasts detection + re-initialisation (+ queue wait when no spare node is at hand) + checkpoint
  load; training then resumes from the latest complete checkpoint.
- A checkpoint blocks training for its snapshot time and is complete once written, max(blocking, write)
  after it started; a failure before completion means it never counts.
- No checkpoint is taken after the last step.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from gpustack_compiler.errors import InputError

from .events import NS_PER_S, EventKind, EventQueue, Priority, to_ns
from .parameters import JobParameters
from .policies import (ChangeMembership, Intervention, Observation, ObservedFailure, Policy, SetCheckpointInterval,
                       SetSyncCadence)
from .sites import Placement

PHASES = ("compute", "communication", "checkpoint", "idle")
STREAM_FAILURES = 0  # SeedSequence child per purpose, so new purposes never shift the failure streams


@dataclass
class Replication:
    """Outcome of one replication; times in integer nanoseconds, work in whole steps."""

    wallclock_ns: int
    total_steps: int
    useful_steps: int
    attempted_steps: int
    lost_steps: int
    tokens: int
    useful_ns: int
    lost_ns: int
    phase_ns: dict[str, int]
    interruptions: dict[str, int]
    checkpoints_started: int
    checkpoints_completed: int
    lost_gpu_hours: float
    energy_j: dict[str, dict[str, float]]  # site -> phase -> joules (phases with a known power only)
    failure_times_ns: tuple[int, ...]
    notes: tuple[str, ...]
    log: list[dict] = field(default_factory=list)


class _Timing:
    """Elapsed time to reach a step position: the token-time of the steps at the job's throughput, plus
    one cross-site synchronisation stall every `sync_every` steps. Rounded to ns at each position (not
    per step), so the time of an uninterrupted stretch telescopes to the exact total."""

    def __init__(self, params: JobParameters, nodes: int, sync_every: int | None, sync_ns: int):
        self.tokens_per_step = params.tokens_per_step
        self.budget = params.token_budget
        # Data-parallel shrink or growth keeps the global batch: throughput scales with the nodes.
        self.tps = params.tokens_per_second if nodes == params.nodes else params.tokens_per_second * nodes / params.nodes
        self.sync_every = sync_every
        self.sync_ns = sync_ns

    def tokens(self, pos: int) -> float:
        return min(pos * self.tokens_per_step, self.budget)

    def compute_ns(self, pos: int) -> int:
        return to_ns(self.tokens(pos) / self.tps)

    def syncs(self, pos: int) -> int:
        return pos // self.sync_every if self.sync_every else 0

    def at(self, pos: int) -> int:
        return self.compute_ns(pos) + self.sync_ns * self.syncs(pos)


class _Run:
    """The job running from `t0` at step `p0`, a checkpoint after every `k` steps (none after the last)."""

    def __init__(self, t0: int, p0: int, k: int, total: int, timing: _Timing, block_ns: int, write_ns: int):
        self.t0, self.p0, self.k, self.total, self.timing = t0, p0, k, total, timing
        self.block_ns = block_ns
        self.complete_ns = max(block_ns, write_ns)
        self.base = timing.at(p0)
        self.n_ckpt = (total - 1 - p0) // k if total > p0 else 0

    def t_at(self, pos: int) -> int:
        """When step position `pos` is reached (its compute done, before any checkpoint taken there)."""
        before = (pos - self.p0 - 1) // self.k if pos > self.p0 else 0
        return self.t0 + self.timing.at(pos) - self.base + before * self.block_ns

    def ckpt_start(self, j: int) -> int:
        return self.t_at(self.p0 + j * self.k)

    def position_at(self, t: int) -> int:
        lo, hi = self.p0, self.total
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.t_at(mid) <= t:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def checkpoints_by(self, t: int, after_ns: int) -> int:
        """Checkpoints of this run that reached `after_ns` past their start by time t."""
        lo, hi = 0, self.n_ckpt
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.ckpt_start(mid) + after_ns <= t:
                lo = mid
            else:
                hi = mid - 1
        return lo


class _Failures:
    """One Poisson process per failure class, each drawn lazily from its own generator. The generators
    live here only; the next failure time exists nowhere until the previous one has happened."""

    def __init__(self, params: JobParameters, seed: np.random.SeedSequence, queue: EventQueue):
        streams = seed.spawn(max(1, len(params.failure_classes)))
        self._rngs = [np.random.Generator(np.random.PCG64(s)) for s in streams]
        self._params, self._queue = params, queue
        self._generation = [0] * len(params.failure_classes)

    def schedule_all(self, now: int, nodes: int) -> None:
        for i in range(len(self._params.failure_classes)):
            self.schedule(i, now, nodes)

    def schedule(self, i: int, now: int, nodes: int) -> None:
        self._generation[i] += 1
        p = self._params
        rate = p.failure_classes[i].rate_s(nodes, p.gpus_per_node, p.job_links, p.job_switches)
        if rate > 0:
            delay = to_ns(self._rngs[i].exponential(1.0 / rate))
            self._queue.push(now + delay, Priority.WORLD, EventKind.FAILURE, (i, self._generation[i]))

    def current(self, i: int, generation: int) -> bool:
        return self._generation[i] == generation


class Replay:
    def __init__(self, params: JobParameters, placement: Placement, policy: Policy, seed: np.random.SeedSequence,
                 horizon_ns: int | None, log: bool):
        self.p, self.placement, self.policy, self.horizon, self.logging = params, placement, policy, horizon_ns, log
        self.queue = EventQueue()
        self.failures = _Failures(params, seed.spawn(1 + STREAM_FAILURES)[STREAM_FAILURES], self.queue)
        self.total = params.total_steps
        self.nodes = placement.nodes
        self.spares = placement.spares
        self.sync_every = placement.sync_every_steps
        self.k: int | None = None
        self.interval_s: float | None = None
        self.block_ns, self.write_ns = to_ns(params.checkpoint_blocking_s), to_ns(params.checkpoint_write_s)
        self.pos = self.ckpt_pos = 0
        self.last_ckpt_ns: int | None = None
        self.attempted = self.lost = self.ckpt_started = self.ckpt_completed = 0
        self.phase_ns = dict.fromkeys(PHASES, 0)
        self.node_phase_ns = dict.fromkeys(PHASES, 0)  # node-nanoseconds, for energy and GPU-hours
        self.failed: list[ObservedFailure] = []
        self.failure_ns: list[int] = []
        self.interruptions: dict[str, int] = {}
        self.compute_total_ns = 0
        self.notes: set[str] = set()
        self.rows: list[dict] = []

    # --- event log ---
    def _row(self, t: int, priority: Priority, kind: EventKind, **cols) -> None:
        seq = self.queue.next_seq()
        if self.logging:
            self.rows.append({"time_ns": t, "priority": int(priority), "kind": kind.name.lower(), "seq": seq,
                              "cause": cols.get("cause", ""), "position": cols.get("position", self.pos),
                              "count": cols.get("count", 0), "duration_ns": cols.get("duration_ns", 0),
                              "nodes": self.nodes})

    # --- decisions ---
    def _observe(self, now: int) -> Observation:
        return Observation(
            elapsed_s=now / NS_PER_S, failures=tuple(self.failed),
            measured_step_time_s=(self.compute_total_ns / NS_PER_S / self.attempted) if self.attempted else None,
            steps_completed=self.attempted, checkpoints_completed=self.ckpt_completed,
            last_checkpoint_s=None if self.last_ckpt_ns is None else self.last_ckpt_ns / NS_PER_S,
            nodes=self.nodes, spares_available=self.spares, checkpoint_interval_s=self.interval_s)

    def _epoch(self, now: int) -> None:
        """Apply the policy's interventions together: all are checked before any takes effect."""
        actions: tuple[Intervention, ...] = tuple(self.policy.decide(self._observe(now)))
        nodes, interval, sync = self.nodes, self.interval_s, self.sync_every
        for act in actions:
            if isinstance(act, SetCheckpointInterval):
                if not act.seconds > 0:
                    raise InputError(f"policy {self.policy.name}: checkpoint interval {act.seconds!r} s is not positive")
                interval = act.seconds
            elif isinstance(act, ChangeMembership):
                nodes += act.nodes
            elif isinstance(act, SetSyncCadence):
                sync = act.local_steps
        if nodes < 1 or (self.spares is not None and nodes - self.nodes > self.spares):
            raise InputError(f"policy {self.policy.name}: membership change to {nodes} nodes is not possible")
        if nodes != self.nodes:
            if self.spares is not None:
                self.spares -= nodes - self.nodes
            self._row(now, Priority.JOB, EventKind.MEMBERSHIP_CHANGE, count=nodes - self.nodes)
            self.nodes = nodes
            self.failures.schedule_all(now, nodes)  # memoryless: redrawing at the new exposure is exact
        self.sync_every = sync
        if interval is None:
            raise InputError(f"policy {self.policy.name}: set no checkpoint interval")
        self.interval_s = interval
        k = max(1, round(interval / self.p.step_time_s))
        # A checkpoint must be written before the next starts (cluster.ckpt.interval.covers_write).
        k_min = -(-(self.write_ns - self.block_ns) // to_ns(self.p.step_time_s))
        if k < k_min:
            self.notes.add(f"checkpoint interval raised to {k_min} steps so each write ends before the next starts")
            k = k_min
        self.k = k

    # --- the job ---
    def _start_run(self, now: int) -> _Run:
        timing = _Timing(self.p, self.nodes, self.sync_every, self.placement.sync_ns)
        return _Run(now, self.pos, self.k, self.total, timing, self.block_ns, self.write_ns)

    def _close_run(self, run: _Run, t: int) -> None:
        """Account for the run up to time t (t no later than its end): steps, checkpoints, phases."""
        pos = run.position_at(t)
        blocks = run.checkpoints_by(t, run.block_ns)
        completed = run.checkpoints_by(t, run.complete_ns)
        started = blocks + (1 if blocks < run.n_ckpt and run.ckpt_start(blocks + 1) <= t else 0)
        steps = pos - run.p0
        compute_ns = run.timing.compute_ns(pos) - run.timing.compute_ns(run.p0)
        sync_ns = run.timing.sync_ns * (run.timing.syncs(pos) - run.timing.syncs(run.p0))
        block_ns = blocks * run.block_ns + (min(t - run.ckpt_start(started), run.block_ns) if started > blocks else 0)
        partial_ns = (t - run.t0) - compute_ns - sync_ns - block_ns  # the step under way when the run stopped
        comm_ns = round(compute_ns * self.p.exposed_comm_s / self.p.step_time_s)
        self._add_phase("compute", compute_ns - comm_ns + partial_ns)
        self._add_phase("communication", comm_ns + sync_ns)
        self._add_phase("checkpoint", block_ns)
        self.compute_total_ns += compute_ns
        self.attempted += steps
        self.pos = pos
        self.ckpt_started += started
        self.ckpt_completed += completed
        if completed:
            self.ckpt_pos = run.p0 + completed * run.k
            self.last_ckpt_ns = run.ckpt_start(completed) + run.complete_ns
        self._row(run.t0, Priority.JOB, EventKind.COMPUTE, position=run.p0, count=steps, duration_ns=t - run.t0)
        if started:
            self._row(run.ckpt_start(1), Priority.JOB, EventKind.CHECKPOINT_WRITE, count=started, duration_ns=block_ns)
        if completed:
            self._row(self.last_ckpt_ns, Priority.JOB, EventKind.CHECKPOINT_DRAIN, position=self.ckpt_pos,
                      count=completed)
        if sync_ns:
            self._row(run.t0, Priority.JOB, EventKind.STATE_TRANSFER, count=sync_ns // run.timing.sync_ns,
                      duration_ns=sync_ns)

    def _add_phase(self, phase: str, ns: int) -> None:
        self.phase_ns[phase] += ns
        self.node_phase_ns[phase] += ns * self.nodes

    def _recovery_ns(self, replaces_node: bool) -> int:
        wait = 0
        if replaces_node and self.spares is not None:
            if self.spares > 0:
                self.spares -= 1
            else:
                wait = to_ns(self.p.requeue_s)
        return to_ns(self.p.detection_s) + to_ns(self.p.reinit_s) + wait + to_ns(self.p.checkpoint_load_s)

    def run(self) -> Replication:
        self._epoch(0)
        self.failures.schedule_all(0, self.nodes)
        run: _Run | None = self._start_run(0)
        down_since = recovery_gen = 0
        while True:
            t_next = self.queue.peek_time()
            t_done = run.t_at(self.total) if run is not None else None
            if (t_done is not None and (t_next is None or t_done < t_next)
                    and (self.horizon is None or t_done <= self.horizon)):
                end = t_done
                break
            if self.horizon is not None and (t_next is None or t_next > self.horizon):
                end = self.horizon
                break
            if t_next is None:
                raise InputError("the job cannot finish: it is down and nothing is pending")
            ev = self.queue.pop()
            t = ev.time_ns
            if ev.kind == EventKind.FAILURE:
                i, gen = ev.payload
                if not self.failures.current(i, gen):
                    continue
                cls = self.p.failure_classes[i]
                self.failures.schedule(i, t, self.nodes)
                self.failed.append(ObservedFailure(t / NS_PER_S, cls.name))
                self.failure_ns.append(t)
                self.interruptions[cls.name] = self.interruptions.get(cls.name, 0) + 1
                self._row(t, Priority.WORLD, EventKind.FAILURE, cause=cls.name)
                if run is not None:
                    self._close_run(run, t)
                    self.lost += self.pos - self.ckpt_pos
                    self.pos = self.ckpt_pos
                    run = None
                    down_since = t
                recovery_gen += 1
                self.queue.push(t + self._recovery_ns(cls.per in ("gpu", "node")), Priority.JOB, EventKind.RECOVERY,
                                (recovery_gen,))
            elif ev.kind == EventKind.RECOVERY and ev.payload[0] == recovery_gen:
                self._add_phase("idle", t - down_since)
                self._row(down_since + to_ns(self.p.detection_s), Priority.JOB, EventKind.DETECTION)
                self._row(t - to_ns(self.p.checkpoint_load_s), Priority.JOB, EventKind.RESTART)
                self._row(t, Priority.JOB, EventKind.RECOVERY, position=self.pos, duration_ns=t - down_since)
                self._epoch(t)
                run = self._start_run(t)
        if run is None:
            self._add_phase("idle", end - down_since)
        else:
            self._close_run(run, end)
        return self._result(end)

    def _result(self, end: int) -> Replication:
        timing = _Timing(self.p, self.p.nodes, None, 0)
        useful_ns = timing.compute_ns(self.pos)
        gpn = self.p.gpus_per_node
        lost_node_ns = self.node_phase_ns["idle"] + (self.node_phase_ns["compute"] + self.node_phase_ns["communication"]
                                                     - self.p.nodes * useful_ns)
        return Replication(
            wallclock_ns=end, total_steps=self.total, useful_steps=self.pos, attempted_steps=self.attempted,
            lost_steps=self.lost, tokens=int(timing.tokens(self.pos)), useful_ns=useful_ns,
            lost_ns=end - useful_ns - self.phase_ns["checkpoint"],
            phase_ns=dict(self.phase_ns), interruptions=dict(sorted(self.interruptions.items())),
            checkpoints_started=self.ckpt_started, checkpoints_completed=self.ckpt_completed,
            lost_gpu_hours=max(lost_node_ns, 0) * gpn / (3600 * NS_PER_S), energy_j=self._energy(),
            failure_times_ns=tuple(self.failure_ns), notes=tuple(sorted(self.notes)),
            log=sorted(self.rows, key=lambda r: (r["time_ns"], r["priority"], EventKind[r["kind"].upper()], r["seq"])))

    def _energy(self) -> dict[str, dict[str, float]]:
        power = {"compute": self.p.node_power_compute_w, "communication": self.p.node_power_communication_w,
                 "checkpoint": self.p.node_power_checkpoint_w, "idle": self.p.node_power_idle_w}
        out: dict[str, dict[str, float]] = {}
        for site, share in self.placement.shares():
            out[site] = {ph: power[ph] * self.node_phase_ns[ph] * share / NS_PER_S for ph in PHASES if power[ph] is not None}
        return out
