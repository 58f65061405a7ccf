"""One replication of a training job: steps, checkpoints, failures, recovery, site limits and power.

The job's own progress is never stepped one event per training step. Between two world events (a
failure, a grid or cooling signal, the end of a recovery, the horizon) the job follows a fixed pattern
(k steps, a checkpoint, k steps, ...), so where it stands at any instant is found in closed form (a binary
search over step positions); only world events go through the event queue. A replay costs O(failures),
not O(steps).

Model (docs/datacenter.md has the full list of assumptions):
- Fail-stop: any failure of a part the job depends on stops every rank. Each failure class is an
  independent Poisson process in wall-clock time over the parts the job holds, running whatever the job
  is doing (so, as in Daly's model, a failure during recovery starts the recovery again).
- Recovery lasts detection + re-initialisation (+ queue wait when no spare node is at hand) + checkpoint
  load; training then resumes from the latest complete checkpoint.
- A checkpoint blocks training for its snapshot time and is complete once written, max(blocking, write)
  after it started; a failure before completion means it never counts.
- No checkpoint is taken after the last step.
- A change of membership that is not a failure (a grid or cooling signal, a migration's nodes arriving)
  is a data-parallel shrink or growth in place: the step under way is redone at the new size, a checkpoint
  being written keeps being written, nothing is rolled back.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from gpustack_compiler.base.errors import FindingError, InputError
from gpustack_compiler.base.limits import MAX_FAILURES_WITHOUT_PROGRESS

from .events import NS_PER_S, EventKind, EventQueue, Priority, to_ns
from .parameters import JobParameters
from .policies import (
    ChangeMembership,
    Intervention,
    Migrate,
    Observation,
    ObservedFailure,
    Policy,
    SetCheckpointInterval,
    SetLayout,
    SetPowerCap,
    SetSyncCadence,
)
from .resources import site_calendars
from .sites import Placement, sync_hops

# idle: nodes held by the job with nothing to run (a migration's state in flight, a membership change);
# recovery: the job down after a failure or for a layout switch's restart.
PHASES = ("compute", "communication", "checkpoint", "idle", "recovery")
STREAM_FAILURES = 0  # SeedSequence child per purpose, so new purposes never shift the failure streams
SIGNAL_KINDS = {"grid": EventKind.GRID_SIGNAL, "cooling": EventKind.COOLING_SIGNAL}


def phase_powers(params: JobParameters) -> tuple[float | None, ...]:
    """Node power per phase (PHASES order); None where the catalog gives none."""
    return (params.node_power_compute_w, params.node_power_communication_w, params.node_power_checkpoint_w,
            params.node_power_idle_w, params.node_power_recovery_w)


@dataclass(frozen=True)
class Piece:
    """A stretch of time in which a fixed set of nodes per site does one thing: run the job (`run`, whose
    phases are found in closed form at any instant) or wait in one phase (`run` None: `waiting`, idle or
    recovery). The power series is built from these; `powers` are the node powers per phase of the layout in
    force."""

    t0: int
    t1: int
    site_nodes: tuple[tuple[str, int], ...]
    run: _Run | None
    powers: tuple[float | None, ...]
    waiting: str = "idle"


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
    pieces: tuple[Piece, ...] = ()  # kept for logged replications only (the power series)


class _Timing:
    """Elapsed time to reach a step position: the token-time of the steps at the job's throughput, plus
    one cross-site synchronisation stall every `sync_every` steps, plus the wait of each synchronisation
    that met a WAN link's down window (`add_wait`). Rounded to ns at each position (not per step), so the
    time of an uninterrupted stretch telescopes to the exact total."""

    def __init__(self, params: JobParameters, nodes: int, sync_every: int | None, sync_ns: int):
        self.tokens_per_step = params.tokens_per_step
        self.budget = params.token_budget
        # Data-parallel shrink or growth keeps the global batch: throughput scales with the nodes.
        self.tps = params.tokens_per_second if nodes == params.nodes else params.tokens_per_second * nodes / params.nodes
        self.sync_every = sync_every
        self.sync_ns = sync_ns
        self.wait_index: list[int] = []  # global sync numbers that waited, increasing
        self.wait_cum: list[int] = [0]  # wait_cum[i]: the waits of the first i of them
        self.wait_link: list[str] = []

    def tokens(self, pos: int) -> float:
        return min(pos * self.tokens_per_step, self.budget)

    def compute_ns(self, pos: int) -> int:
        return to_ns(self.tokens(pos) / self.tps)

    def syncs(self, pos: int) -> int:
        return pos // self.sync_every if self.sync_every else 0

    def waited(self, n_syncs: int) -> int:
        """The waits of the synchronisations numbered up to n_syncs."""
        return self.wait_cum[bisect.bisect_right(self.wait_index, n_syncs)] if self.wait_index else 0

    def at(self, pos: int) -> int:
        n = self.syncs(pos)
        return self.compute_ns(pos) + self.sync_ns * n + self.waited(n)

    def add_wait(self, n_sync: int, wait_ns: int, link: str) -> None:
        self.wait_index.append(n_sync)
        self.wait_cum.append(self.wait_cum[-1] + wait_ns)
        self.wait_link.append(link)


def _earliest_fit(down: tuple[tuple[int, float], ...], start: int, duration: int) -> float:
    """The earliest time at or after `start` when a transfer of `duration` meets none of the down windows
    (sorted); inf when the link never comes back up."""
    s = start
    for a, b in down:
        if b <= s:
            continue
        if a >= s + duration:
            break
        s = b
    return s


class _Run:
    """The job running from `t0` at step `p0`, a checkpoint at every k-th position counted from `anchor` (the
    last checkpoint started, p0 itself after a rollback) and after p0, none after the last step.
    `hops`: per WAN hop of a cross-site synchronisation, (link name, down windows, transfer ns)."""

    def __init__(self, t0: int, p0: int, anchor: int, k: int, total: int, timing: _Timing, block_ns: int,
                 write_ns: int, comm_ratio: float, hops: tuple[tuple[str, tuple, int], ...] = ()):
        self.t0, self.p0, self.anchor, self.k, self.total, self.timing = t0, p0, anchor, k, total, timing
        self.block_ns = block_ns
        self.complete_ns = max(block_ns, write_ns)
        self.comm_ratio = comm_ratio
        self.base = timing.at(p0)
        self.skip = (p0 - anchor) // k  # checkpoint positions of the cadence at or before p0
        self.n_ckpt = (total - 1 - anchor) // k - self.skip if total > p0 else 0
        self.hops = tuple(h for h in hops if h[1]) if timing.sync_every else ()
        # Synchronisations after `next_sync` have not been checked against the links' down windows yet.
        self.next_sync = timing.syncs(p0) + 1

    def t_at(self, pos: int) -> int:
        """When step position `pos` is reached (its compute done, before any checkpoint taken there)."""
        return self.t0 + self.timing.at(pos) - self.base + self._before(pos) * self.block_ns

    def _before(self, pos: int) -> int:
        """Checkpoints of this run taken before reaching `pos`."""
        return (pos - 1 - self.anchor) // self.k - self.skip if pos > self.p0 else 0

    def ckpt_position(self, j: int) -> int:
        """Where the run's j-th checkpoint (from 1) is taken."""
        return self.anchor + (self.skip + j) * self.k

    def ckpt_start(self, j: int) -> int:
        return self.t_at(self.ckpt_position(j))

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

    def phases(self, t: int) -> tuple[int, int, int, int]:
        """(position, compute, communication, checkpoint-blocking ns) from the run's start to t. After
        reaching a position comes the checkpoint taken there (if any), then the next step's compute, then its
        synchronisation; the step under way is split the same way. The three phases sum to t - t0."""
        tm = self.timing
        pos = self.position_at(t)
        reached = self.t_at(pos)
        j, at_ckpt = divmod(pos - self.anchor, self.k)
        in_block = min(t - reached, self.block_ns) if at_ckpt == 0 and 1 <= j - self.skip <= self.n_ckpt else 0
        blocks = self._before(pos) * self.block_ns + in_block
        rest = t - reached - in_block
        step = tm.compute_ns(pos + 1) - tm.compute_ns(pos) if pos < self.total else 0
        compute = tm.compute_ns(pos) - tm.compute_ns(self.p0) + min(rest, step)
        n0, n = tm.syncs(self.p0), tm.syncs(pos)
        syncs = tm.sync_ns * (n - n0) + tm.waited(n) - tm.waited(n0) + rest - min(rest, step)
        # The exposed communication inside steps is a share of their time (the catalog's t_exposed_comm).
        comm = round(compute * self.comm_ratio) + syncs
        return pos, t - self.t0 - comm - blocks, comm, blocks

    def check_links(self, limit: int | None) -> None:
        """Find the synchronisations starting by `limit` (None: all) whose transfer meets a link's down window
        and make each wait for the earliest time its every hop fits. Each window delays at most one."""
        tm = self.timing
        if not self.hops:
            return
        last = tm.syncs(self.total)
        while self.next_sync <= last:
            first = None
            for _, down, d in self.hops:
                for a, b in down:
                    j = self._first_sync_ending_after(a - d)
                    if j is None:
                        break
                    if self._sync_start(j) < b:
                        first = j if first is None else min(first, j)
                        break
            if first is None:
                self.next_sync = last + 1
                return
            start = self._sync_start(first)
            if limit is not None and start > limit:
                return
            fits = [(_earliest_fit(down, start, d) + d, name) for name, down, d in self.hops]
            end, name = max(fits)
            if math.isinf(end):
                raise InputError(f"{name}: down after its last availability window; a synchronisation at "
                                 f"{start / NS_PER_S:.0f} s can never cross it")
            tm.add_wait(first, int(end) - start - tm.sync_ns, name)
            self.next_sync = first + 1

    def _sync_start(self, n_sync: int) -> int:
        return self.t_at(n_sync * self.timing.sync_every) - self.timing.sync_ns

    def _first_sync_ending_after(self, t: float) -> int | None:
        """The first unchecked synchronisation that starts after t."""
        lo, hi = self.next_sync, self.timing.syncs(self.total)
        if lo > hi or self._sync_start(hi) <= t:
            return None
        while lo < hi:
            mid = (lo + hi) // 2
            if self._sync_start(mid) > t:
                hi = mid
            else:
                lo = mid + 1
        return lo


class _Failures:
    """One Poisson process per failure class, each drawn lazily from its own generator. The generators
    live here only; the next failure time exists nowhere until the previous one has happened."""

    def __init__(self, params: JobParameters, seed: np.random.SeedSequence, queue: EventQueue):
        classes = params.failure_classes
        streams = seed.spawn(max(1, len(classes)) + 1)
        self._rngs = [np.random.Generator(np.random.PCG64(s)) for s in streams[:-1]]
        self._params, self._queue = params, queue
        self._generation = [0] * len(classes)
        # This replication's rate of each class: a gamma draw (the conjugate of a Poisson rate) with the
        # rate's mean and sd, from a stream of its own so the failure times' streams stay as they were.
        draws = np.random.Generator(np.random.PCG64(streams[-1]))
        self._scale = [1.0 if not c.rate_sd_per_unit_s or not c.rate_per_unit_s else
                       float(draws.gamma(k, 1.0 / k)) if (k := (c.rate_per_unit_s / c.rate_sd_per_unit_s) ** 2) else 1.0
                       for c in classes]

    def schedule_all(self, now: int, nodes: int) -> None:
        for i in range(len(self._params.failure_classes)):
            self.schedule(i, now, nodes)

    def schedule(self, i: int, now: int, nodes: int) -> None:
        self._generation[i] += 1
        p = self._params
        rate = self._scale[i] * p.failure_classes[i].rate_s(nodes, p.gpus_per_node, p.job_links, p.job_switches)
        if rate > 0:
            delay = to_ns(self._rngs[i].exponential(1.0 / rate))
            self._queue.push(now + delay, Priority.WORLD, EventKind.FAILURE, (i, self._generation[i]))

    def current(self, i: int, generation: int) -> bool:
        return self._generation[i] == generation


class Replay:
    def __init__(self, params: JobParameters, placement: Placement, policy: Policy, seed: np.random.SeedSequence,
                 horizon_ns: int | None, log: bool, layouts: Mapping[str, JobParameters] | None = None):
        self.p, self.placement, self.policy, self.horizon, self.logging = params, placement, policy, horizon_ns, log
        self.initial = params
        self.layouts = dict(layouts or {})
        self.layout = next((name for name, lp in self.layouts.items() if lp == params), None)
        self.queue = EventQueue()
        self.failures = _Failures(params, seed.spawn(1 + STREAM_FAILURES)[STREAM_FAILURES], self.queue)
        self.total = params.total_steps
        self.sites = placement.sites
        names = [s.name for s in self.sites.sites] if self.sites else [site for site, _ in placement.placed]
        self.target = dict.fromkeys(names, 0) | dict(placement.placed)  # the job's allocation per site
        self.active = dict(self.target)  # nodes in the job per site: the allocation, as far as power feeds it
        self.nodes = placement.nodes
        self.cap_w = {s.name: s.power_cap_w for s in self.sites.sites} if self.sites else {}
        self.limits: dict[tuple[str, str], float] = {}  # (site, grid|cooling) -> limit of a signal in force
        # Per replay: a migration books its link, and the booking is this replication's alone.
        self.calendars = site_calendars(self.sites) if self.sites else {}
        self.incoming: dict[int, tuple[str, int, int]] = {}  # migration id -> (site, nodes, since), in transfer
        self.migrations = 0
        self.spares = placement.spares
        self.sync_every = placement.sync_every_steps or (self.sites.sync_every_steps if self.sites else None)
        self.k: int | None = None
        self.interval_s: float | None = None
        self.pos = self.ckpt_pos = self.anchor = 0
        # The checkpoint position when it last advanced, and the failures since: a replay stalled too long stops.
        self.progress_mark = self.stalled = 0
        self.last_ckpt_ns: int | None = None
        self.pending: tuple[int, int] | None = None  # (position, completion) of a write that outlived its run
        self.attempted = self.lost = self.ckpt_started = self.ckpt_completed = 0
        self.phase_ns = dict.fromkeys(PHASES, 0)
        self.node_ns: dict[tuple[str, str, str | None], int] = {}  # (site, phase, layout) -> node-nanoseconds
        self.useful: list[list] = []  # [from, to, layout]: the steps kept, and the layout that ran them
        self.failed: list[ObservedFailure] = []
        self.failure_ns: list[int] = []
        self.interruptions: dict[str, int] = {}
        self.compute_total_ns = 0
        self.notes: set[str] = set()
        self.rows: list[dict] = []
        self.pieces: list[Piece] = []
        self.run_: _Run | None = None
        self.down = False  # a recovery (or a layout switch's restart) is under way
        self.idle_since = self.down_since = 0
        self.generation = 0  # of the pending recovery or restart; a failure supersedes it

    # --- event log ---
    def _row(self, t: int, priority: Priority, kind: EventKind, **cols) -> None:
        seq = self.queue.next_seq()
        if self.logging:
            self.rows.append({"time_ns": t, "priority": int(priority), "kind": kind.name.lower(), "seq": seq,
                              "cause": cols.get("cause", ""), "position": cols.get("position", self.pos),
                              "count": cols.get("count", 0), "duration_ns": cols.get("duration_ns", 0),
                              "nodes": self.nodes, "site": cols.get("site", "")})

    # --- sites and membership ---
    def _site(self, name: str, who: str):
        site = next((s for s in self.sites.sites if s.name == name), None) if self.sites else None
        if site is None:
            raise InputError(f"policy {self.policy.name}: {who}: no site {name!r}"
                             + ("" if self.sites else " (give a sites file)"))
        return site

    def _capacity(self, name: str, cap_w: float) -> int:
        """Nodes a site's power feeds under the operator's cap and the grid and cooling limits in force."""
        site = next(s for s in self.sites.sites if s.name == name)
        grid = self.limits.get((name, "grid"), site.grid_limit_w)
        cooling = self.limits.get((name, "cooling"), site.cooling_limit_w)
        return site.accelerators_under(min(cap_w, grid, cooling)) // self.p.gpus_per_node

    def _apply_membership(self, now: int) -> None:
        """Membership follows the allocation as far as each site's power feeds it; log what changed."""
        before = self.nodes
        for name, want in self.target.items():
            have = want if not self.sites else min(want, self._capacity(name, self.cap_w[name]))
            if have != self.active[name]:
                delta, self.active[name] = have - self.active[name], have
                self.nodes += delta
                self._row(now, Priority.JOB, EventKind.MEMBERSHIP_CHANGE, count=delta, site=name)
        if self.nodes != before:
            self.failures.schedule_all(now, self.nodes)  # memoryless: redrawing at the new exposure is exact

    def _hops(self) -> tuple[tuple[str, tuple, int], ...]:
        """The WAN hops of a synchronisation among the sites in use, each with its down windows."""
        in_use = [name for name, n in self.active.items() if n]
        if len(in_use) < 2:
            return ()
        if self.sites is None:
            return (("", (), self.placement.sync_ns),)
        if self.sync_every is None:
            raise InputError(f"{self.sites.path}: sync_every_steps: required, the job spans {len(in_use)} sites")
        return tuple((link.name, link.down_ns(), d) for link, d in sync_hops(self.sites, in_use, self.p.model_sync_bits))

    # --- decisions ---
    def _observe(self, now: int) -> Observation:
        return Observation(
            elapsed_s=now / NS_PER_S, failures=tuple(self.failed),
            measured_step_time_s=(self.compute_total_ns / NS_PER_S / self.attempted) if self.attempted else None,
            steps_completed=self.attempted, checkpoints_completed=self.ckpt_completed,
            last_checkpoint_s=None if self.last_ckpt_ns is None else self.last_ckpt_ns / NS_PER_S,
            nodes=self.nodes, spares_available=self.spares, checkpoint_interval_s=self.interval_s,
            site_nodes=tuple(self.active.items()), power_caps_w=tuple(self.cap_w.items()), layout=self.layout)

    def _epoch(self, now: int) -> bool:
        """Apply the policy's interventions together: all are checked before any takes effect. The job is
        at its latest checkpoint here (the start, or the end of a recovery). True if the layout changes."""
        who = f"policy {self.policy.name}"
        actions: tuple[Intervention, ...] = tuple(self.policy.decide(self._observe(now)))
        target, caps, spares = dict(self.target), dict(self.cap_w), self.spares
        interval, sync, layout, moves = self.interval_s, self.sync_every, self.layout, []
        for act in actions:
            if isinstance(act, SetCheckpointInterval):
                if not act.seconds > 0:
                    raise InputError(f"{who}: checkpoint interval {act.seconds!r} s is not positive")
                interval = act.seconds
            elif isinstance(act, ChangeMembership):
                site = act.site if act.site is not None else self.placement.placed[0][0]
                if site not in target:
                    self._site(site, "membership change")
                target[site] += act.nodes
                if spares is not None:
                    spares -= act.nodes
            elif isinstance(act, SetSyncCadence):
                if act.local_steps < 1:
                    raise InputError(f"{who}: synchronisation every {act.local_steps} steps is not possible")
                sync = act.local_steps
            elif isinstance(act, SetPowerCap):
                site = self._site(act.site, "power cap")
                if not 0 <= act.watts <= min(site.cooling_limit_w, site.grid_limit_w):
                    raise InputError(f"{who}: power cap {act.watts!r} W at {site.name} is outside 0 to its cooling "
                                     f"and grid limits ({min(site.cooling_limit_w, site.grid_limit_w):g} W)")
                caps[site.name] = act.watts
            elif isinstance(act, Migrate):
                self._site(act.from_site, "migration")
                self._site(act.to_site, "migration")
                if act.nodes < 1 or act.from_site == act.to_site or self.sites.link(act.from_site, act.to_site) is None:
                    raise InputError(f"{who}: migration of {act.nodes} nodes from {act.from_site} to {act.to_site} "
                                     "needs a positive count and a link between two sites")
                target[act.from_site] -= act.nodes
                moves.append(act)
            elif isinstance(act, SetLayout):
                if act.name not in self.layouts:
                    raise InputError(f"{who}: layout {act.name!r} is not one of simulate's layouts "
                                     f"({', '.join(self.layouts) or 'none given'})")
                layout = act.name
            else:
                raise InputError(f"{who}: {act!r} is not an intervention")
        if any(n < 0 for n in target.values()) or sum(target.values()) + sum(m.nodes for m in moves) < 1 or (
                spares is not None and spares < 0):
            raise InputError(f"{who}: membership change to {target} nodes per site is not possible "
                             f"(spares {self.spares})")
        if interval is None:
            raise InputError(f"{who}: set no checkpoint interval")
        self.target, self.cap_w, self.spares, self.sync_every, self.interval_s = target, caps, spares, sync, interval
        for move in moves:
            self._migrate(now, move)
        switched = layout != self.layout
        if switched:
            self.layout, self.p = layout, self.layouts[layout]
        self._apply_membership(now)
        k = max(1, round(interval / self.p.step_time_s))
        # A checkpoint must be written before the next starts (cluster.ckpt.interval.covers_write).
        block_ns, write_ns = to_ns(self.p.checkpoint_blocking_s), to_ns(self.p.checkpoint_write_s)
        k_min = -(-(write_ns - block_ns) // to_ns(self.p.step_time_s))
        if k < k_min:
            self.notes.add(f"checkpoint interval raised to {k_min} steps so each write ends before the next starts")
            k = k_min
        self.k = k
        return switched

    def _migrate(self, now: int, move: Migrate) -> None:
        """Send the job's state over the link at its earliest free time; the nodes join when it has arrived."""
        link = self.sites.link(move.from_site, move.to_site)
        duration = to_ns(self.p.checkpoint_bits / link.bandwidth_bit_s + link.latency_s)
        what = f"migration {move.from_site}->{move.to_site}"
        start = self.calendars[link.name].place_flexible(now, duration, link.bandwidth_bit_s, what)
        if math.isinf(start):
            raise InputError(f"{link.name}: down after its last availability window; the {what} can never cross it")
        self.migrations += 1
        self.incoming[self.migrations] = (move.to_site, move.nodes, now)
        self.queue.push(start + duration, Priority.JOB, EventKind.STATE_TRANSFER, (self.migrations,))
        self._row(now, Priority.JOB, EventKind.STATE_TRANSFER, count=move.nodes, duration_ns=start + duration - now,
                  site=move.to_site, cause=what)

    # --- the job ---
    def _start_run(self, now: int) -> _Run:
        hops = self._hops()
        sync = self.sync_every if hops else None
        timing = _Timing(self.p, self.nodes, sync, max((d for _, _, d in hops), default=0))
        return _Run(now, self.pos, self.anchor, self.k, self.total, timing, to_ns(self.p.checkpoint_blocking_s),
                    to_ns(self.p.checkpoint_write_s), self.p.exposed_comm_s / self.p.step_time_s, hops)

    def _resume(self, now: int) -> None:
        """Train from here if any node is in the job; without one the job waits (idle, drawing nothing)."""
        self.idle_since = now
        self.run_ = self._start_run(now) if self.nodes else None

    def _settle_checkpoint(self, t: int) -> None:
        """A write that outlived its run (membership changed while it drained) counts once it is complete."""
        if self.pending is not None and self.pending[1] <= t:
            pos, done = self.pending
            self.pending = None
            self.ckpt_completed += 1
            if pos > self.ckpt_pos:
                self.ckpt_pos, self.last_ckpt_ns = pos, done
            self._row(done, Priority.JOB, EventKind.CHECKPOINT_DRAIN, position=pos, count=1)

    def _close_run(self, t: int, graceful: bool) -> None:
        """Account for the run up to time t (t no later than its end): steps, checkpoints, phases. `graceful`:
        stopped by a change of membership, not a failure, so a checkpoint being written goes on draining."""
        run, self.run_ = self.run_, None
        self.idle_since = t
        self._settle_checkpoint(t)
        pos, compute_ns, comm_ns, block_ns = run.phases(t)
        blocks = run.checkpoints_by(t, run.block_ns)
        completed = run.checkpoints_by(t, run.complete_ns)
        started = blocks + (1 if blocks < run.n_ckpt and run.ckpt_start(blocks + 1) <= t else 0)
        steps = pos - run.p0
        self._add_phase("compute", compute_ns)
        self._add_phase("communication", comm_ns)
        self._add_phase("checkpoint", block_ns)
        if self.logging:
            self.pieces.append(Piece(run.t0, t, self._snapshot(), run, phase_powers(self.p)))
        self.compute_total_ns += run.timing.compute_ns(pos) - run.timing.compute_ns(run.p0)
        self.attempted += steps
        self.pos = pos
        if steps:
            last = self.useful[-1] if self.useful else None
            if last is not None and last[1] == run.p0 and last[2] == self.layout:
                last[1] = pos
            else:
                self.useful.append([run.p0, pos, self.layout])
        self.ckpt_started += started
        self.ckpt_completed += completed
        if completed:
            self.ckpt_pos = run.ckpt_position(completed)
            self.last_ckpt_ns = run.ckpt_start(completed) + run.complete_ns
        if started:
            self.anchor = run.ckpt_position(started)
        if graceful and completed < blocks:
            self.pending = (run.ckpt_position(blocks), run.ckpt_start(blocks) + run.complete_ns)
        self._row(run.t0, Priority.JOB, EventKind.COMPUTE, position=run.p0, count=steps, duration_ns=t - run.t0)
        if comm_ns:
            # the stretch's exposed collectives, aggregated as its steps are
            self._row(run.t0, Priority.JOB, EventKind.COLLECTIVE, position=run.p0, count=steps, duration_ns=comm_ns)
        if started:
            self._row(run.ckpt_start(1), Priority.JOB, EventKind.CHECKPOINT_WRITE, count=started, duration_ns=block_ns)
        if completed:
            self._row(self.last_ckpt_ns, Priority.JOB, EventKind.CHECKPOINT_DRAIN, position=self.ckpt_pos,
                      count=completed)
        tm = run.timing
        n0, n = tm.syncs(run.p0), tm.syncs(pos)
        waited = bisect.bisect_right(tm.wait_index, n) - bisect.bisect_right(tm.wait_index, n0)
        if n - n0 - waited:
            self._row(run.t0, Priority.JOB, EventKind.STATE_TRANSFER, count=n - n0 - waited,
                      duration_ns=(n - n0 - waited) * tm.sync_ns)
        for i in range(bisect.bisect_right(tm.wait_index, n0), bisect.bisect_right(tm.wait_index, n)):
            wait = tm.wait_cum[i + 1] - tm.wait_cum[i]
            j = tm.wait_index[i]
            self._row(run._sync_start(j) - wait, Priority.JOB, EventKind.STATE_TRANSFER, position=j * tm.sync_every,
                      count=1, duration_ns=tm.sync_ns + wait, cause=f"waited for {tm.wait_link[i]}")

    def _snapshot(self) -> tuple[tuple[str, int], ...]:
        return tuple((s, n) for s, n in self.active.items() if n)

    def _add_phase(self, phase: str, ns: int) -> None:
        self.phase_ns[phase] += ns
        for site, n in self.active.items():
            if n:
                key = (site, phase, self.layout)
                self.node_ns[key] = self.node_ns.get(key, 0) + ns * n

    def _settle_idle(self, t: int) -> None:
        """The job is not running: account its nodes as recovering (the job is down) or idle from the last
        settlement to t."""
        if t > self.idle_since:
            phase = "recovery" if self.down else "idle"
            self._add_phase(phase, t - self.idle_since)
            if self.logging and self.nodes:
                self.pieces.append(Piece(self.idle_since, t, self._snapshot(), None, phase_powers(self.p), phase))
        self.idle_since = t

    def _settle_incoming(self, ident: int, t: int) -> tuple[str, int]:
        """A migration's nodes idle at their new site from the decision until the state has arrived."""
        site, n, since = self.incoming.pop(ident)
        key = (site, "idle", self.layout)
        self.node_ns[key] = self.node_ns.get(key, 0) + (t - since) * n
        if self.logging and t > since:
            self.pieces.append(Piece(since, t, ((site, n),), None, phase_powers(self.p)))
        return site, n

    def _reconfigure(self, t: int, change) -> None:
        """A change of membership from outside the job's own progress: stop the run (gracefully), change,
        and train on at the new membership unless a recovery is under way."""
        if self.run_ is not None:
            self._close_run(t, graceful=True)
        else:
            self._settle_idle(t)
        change()
        self._apply_membership(t)
        if not self.down:
            self._resume(t)

    def _restart(self, t: int, duration_ns: int, kind: EventKind) -> None:
        """The job is down until t + duration_ns (a recovery or a layout switch's restart)."""
        if not self.down:
            self.down_since = t
        self.down = True
        self.generation += 1
        self.queue.push(t + duration_ns, Priority.JOB, kind, (self.generation,))

    def _after_epoch(self, t: int, switched: bool) -> None:
        if switched:
            duration = to_ns(self.p.reinit_s) + to_ns(self.p.checkpoint_load_s)
            self._row(t, Priority.JOB, EventKind.RESTART, cause=f"layout {self.layout}", duration_ns=duration)
            self._restart(t, duration, EventKind.RESTART)
        else:
            self._resume(t)

    def _recovery_ns(self, replaces_node: bool) -> int:
        wait = 0
        if replaces_node and self.spares is not None:
            if self.spares > 0:
                self.spares -= 1
            else:
                wait = to_ns(self.p.requeue_s)
        return to_ns(self.p.detection_s) + to_ns(self.p.reinit_s) + wait + to_ns(self.p.checkpoint_load_s)

    def _schedule_signals(self) -> None:
        for site in self.sites.sites if self.sites else ():
            for sig in site.signals:
                payload = (site.name, sig.kind, sig.end_ns - sig.start_ns)
                self.queue.push(sig.start_ns, Priority.WORLD, SIGNAL_KINDS[sig.kind], payload + (sig.limit_w,))
                self.queue.push(sig.end_ns, Priority.WORLD, SIGNAL_KINDS[sig.kind], payload + (None,))

    def _signal(self, t: int, site: str, kind: str, window_ns: int, limit_w: float | None) -> None:
        def change():
            # Logged once the run is stopped, so the row holds the job's position at the signal.
            self._row(t, Priority.WORLD, SIGNAL_KINDS[kind], site=site, duration_ns=window_ns,
                      cause="start" if limit_w is not None else "end")
            if limit_w is None:
                del self.limits[(site, kind)]
            else:
                self.limits[(site, kind)] = limit_w

        self._reconfigure(t, change)

    def _failure(self, t: int, i: int) -> None:
        cls = self.p.failure_classes[i]
        self.failures.schedule(i, t, self.nodes)
        self.failed.append(ObservedFailure(t / NS_PER_S, cls.name))
        self.failure_ns.append(t)
        self.interruptions[cls.name] = self.interruptions.get(cls.name, 0) + 1
        self._row(t, Priority.WORLD, EventKind.FAILURE, cause=cls.name)
        if self.run_ is not None:
            self._close_run(t, graceful=False)
        else:
            self._settle_idle(t)
            self._settle_checkpoint(t)
        self.pending = None  # a write still draining is lost with the job's state
        if self.ckpt_pos > self.progress_mark:
            self.progress_mark, self.stalled = self.ckpt_pos, 0
        self.stalled += 1
        if self.stalled > MAX_FAILURES_WITHOUT_PROGRESS:
            raise FindingError(f"the replay makes no progress: {self.stalled - 1:,} failures in a row (the limit) "
                               f"since a checkpoint last advanced, at step {self.ckpt_pos:,} of {self.total:,} "
                               f"(checkpoint every {self.k:,} steps; the job fails every {self.p.job_mtbf_s:,.6g} s "
                               "on average)", "checkpoint more often than the job fails")
        self.lost += self.pos - self.ckpt_pos
        self.pos = self.anchor = self.ckpt_pos
        while self.useful and self.useful[-1][0] >= self.pos:
            self.useful.pop()
        if self.useful:
            self.useful[-1][1] = min(self.useful[-1][1], self.pos)
        self._restart(t, self._recovery_ns(cls.per in ("gpu", "node")), EventKind.RECOVERY)

    def run(self) -> Replication:
        self._schedule_signals()
        switched = self._epoch(0)
        self.failures.schedule_all(0, self.nodes)
        self._after_epoch(0, switched)
        while True:
            t_next = self.queue.peek_time()
            if self.run_ is not None:
                limits = [t for t in (t_next, self.horizon) if t is not None]
                self.run_.check_links(min(limits) if limits else None)
                t_done = self.run_.t_at(self.total)
                if (t_next is None or t_done < t_next) and (self.horizon is None or t_done <= self.horizon):
                    end = t_done
                    break
            if self.horizon is not None and (t_next is None or t_next > self.horizon):
                end = self.horizon
                break
            if t_next is None:
                raise InputError("the job cannot finish: it is down or has no node, and nothing is pending")
            ev = self.queue.pop()
            t = ev.time_ns
            if ev.kind == EventKind.FAILURE:
                if self.failures.current(*ev.payload):
                    self._failure(t, ev.payload[0])
            elif ev.kind in (EventKind.RECOVERY, EventKind.RESTART) and ev.payload[0] == self.generation:
                self._settle_idle(t)
                self.down = False
                if ev.kind == EventKind.RECOVERY:
                    self._row(self.down_since + to_ns(self.p.detection_s), Priority.JOB, EventKind.DETECTION)
                    self._row(t - to_ns(self.p.checkpoint_load_s), Priority.JOB, EventKind.RESTART)
                    self._row(t, Priority.JOB, EventKind.RECOVERY, position=self.pos, duration_ns=t - self.down_since)
                    self._after_epoch(t, self._epoch(t))
                else:
                    self._resume(t)
            elif ev.kind in (EventKind.GRID_SIGNAL, EventKind.COOLING_SIGNAL):
                self._signal(t, *ev.payload)
            elif ev.kind == EventKind.STATE_TRANSFER:
                site, n = self._settle_incoming(ev.payload[0], t)
                self._reconfigure(t, lambda: self.target.__setitem__(site, self.target[site] + n))
        if self.run_ is not None:
            self._close_run(end, graceful=True)
        else:
            self._settle_idle(end)
        self._settle_checkpoint(end)
        for ident in list(self.incoming):
            self._settle_incoming(ident, end)
        return self._result(end)

    def _result(self, end: int) -> Replication:
        # Useful time: the kept steps at the full membership of the layout that ran them.
        params = {None: self.initial, **self.layouts}
        useful_ns = useful_node_ns = 0
        for a, b, layout in self.useful:
            lp = params[layout]
            timing = _Timing(lp, lp.nodes, None, 0)
            ns = timing.compute_ns(b) - timing.compute_ns(a)
            useful_ns += ns
            useful_node_ns += ns * lp.nodes
        busy = sum(ns for (_, phase, _), ns in self.node_ns.items() if phase != "checkpoint")
        return Replication(
            wallclock_ns=end, total_steps=self.total, useful_steps=self.pos, attempted_steps=self.attempted,
            lost_steps=self.lost, tokens=int(_Timing(self.p, self.p.nodes, None, 0).tokens(self.pos)),
            useful_ns=useful_ns, lost_ns=end - useful_ns - self.phase_ns["checkpoint"],
            phase_ns=dict(self.phase_ns), interruptions=dict(sorted(self.interruptions.items())),
            checkpoints_started=self.ckpt_started, checkpoints_completed=self.ckpt_completed,
            lost_gpu_hours=max(busy - useful_node_ns, 0) * self.p.gpus_per_node / (3600 * NS_PER_S),
            energy_j=self._energy(params), failure_times_ns=tuple(self.failure_ns), notes=tuple(sorted(self.notes)),
            log=sorted(self.rows, key=lambda r: (r["time_ns"], r["priority"], EventKind[r["kind"].upper()], r["seq"])),
            pieces=tuple(self.pieces))

    def _energy(self, params: Mapping[str | None, JobParameters]) -> dict[str, dict[str, float]]:
        out: dict[str, dict[str, float]] = {site: {} for site in self.target}
        for (site, phase, layout), ns in sorted(self.node_ns.items(), key=lambda kv: (kv[0][:2], str(kv[0][2]))):
            power = phase_powers(params[layout])[PHASES.index(phase)]
            if power is not None:
                out[site][phase] = out[site].get(phase, 0.0) + power * ns / NS_PER_S
        return out
