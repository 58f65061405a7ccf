"""A fleet of serving replicas over one or more sites: a router sends each arriving request to a replica,
a controller acts at every control tick on what it observes, and the replicas run between ticks on their
own (continuous batching, replica.py). Grid dispatches are signals the controller hears at its ticks."""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np

from gpustack_compiler.base.errors import InputError

from .control import (
    ROUTING,
    AvoidSite,
    Controller,
    FleetObservation,
    GridEvent,
    MoveRequests,
    SetCap,
    SetEnabled,
    SetShedding,
)
from .parameters import ReplicaParameters
from .replica import PAGED, Log, Replica
from .workloads import Requests

FABRIC_LATENCY_S = 0.0  # between replicas of one site the fabric's rate alone prices a KV transfer


@dataclass(frozen=True)
class SiteLink:
    """How a KV cache crosses between two sites."""

    bandwidth_bit_s: float
    latency_s: float


@dataclass
class FleetRun:
    """One replay: the per-request log and the per-tick series."""

    requests: Requests
    log: Log
    input_tokens: np.ndarray  # as served (a preempted request's prompt includes what it had generated)
    tick_s: float
    site_power_w: np.ndarray  # (ticks, sites)
    busy_share: np.ndarray  # (ticks,) mean over replicas
    kv_share: np.ndarray  # (ticks,)
    queued: np.ndarray  # (ticks,) requests waiting or running
    tokens: np.ndarray  # (ticks,) output tokens generated in each tick
    energy_j: float
    gpu_seconds: float
    gpu_hour_cost: float  # USD per GPU-second
    ttft_objective_s: float
    tpot_objective_s: float
    migrations: int
    deferred: int


def replay(replicas: list[tuple[ReplicaParameters, int]], requests: Requests, horizon_s: float, *,
           routing: str = "least_loaded", controller: Controller | None = None, events: tuple[GridEvent, ...] = (),
           tick_s: float = 1.0, admission: str = PAGED, links: dict[tuple[int, int], SiteLink] | None = None,
           n_sites: int = 1) -> FleetRun:
    if routing not in ROUTING:
        raise InputError(f"--policy: unknown routing {routing!r}", f"one of {', '.join(ROUTING)}")
    if not horizon_s > 0:
        raise InputError(f"hours: {horizon_s / 3600!r} is not positive")
    controller = controller or Controller()
    n = len(requests)
    log = Log(n)
    inp = requests.input_tokens.copy()
    out = requests.output_tokens.copy()
    reps = [Replica(i, p, inp, out, log, admission, site) for i, (p, site) in enumerate(replicas)]
    site_of = tuple(site for _, site in replicas)
    ticks = int(np.ceil(horizon_s / tick_s))
    power = np.zeros((ticks, n_sites))
    busy = np.zeros(ticks)
    kv = np.zeros(ticks)
    queued = np.zeros(ticks)
    tokens = np.zeros(ticks)
    last_tokens = np.zeros(len(reps))
    shedding = [False] * n_sites
    avoid = [False] * n_sites
    deferred: list[tuple[float, int]] = []  # (release time, rid)
    n_deferred = 0
    migrations = 0
    before = [0.0] * n_sites
    rr = 0
    last_energy = np.zeros(len(reps))
    last_busy = np.zeros(len(reps))
    limit = [next((p.gpu_power_limit_w for p, s in replicas if s == k), 0.0) for k in range(n_sites)]
    caps = list(limit)
    arrivals = requests.arrival_s
    sheddable = requests.sheddable
    cursor = 0
    for k in range(ticks):
        t0, t1 = k * tick_s, min((k + 1) * tick_s, horizon_s)
        active = [e for e in events if e.start_s <= t0 < e.end_s]
        for e in events:
            if t0 <= e.start_s < t0 + tick_s:
                lo = max(0, k - int(60 / tick_s))
                before[e.site] = float(power[lo:k, e.site].mean()) if k > lo else 0.0
        obs = FleetObservation(
            t0, tuple(r.load() for r in reps), tuple(r.kv_share() for r in reps), site_of,
            tuple(r.enabled for r in reps), tuple(power[k - 1]) if k else (0.0,) * n_sites, tuple(before),
            tuple((e.site, e.bid_share * before[e.site]) for e in active), tuple(caps))
        for act in controller.decide(obs):
            if isinstance(act, SetCap):
                caps[act.site] = limit[act.site] if act.watts_per_gpu is None else act.watts_per_gpu
                for r in reps:
                    if r.site == act.site:
                        r.advance(t0)
                        r.set_cap(act.watts_per_gpu)
            elif isinstance(act, SetShedding):
                shedding[act.site] = act.on
                if not act.on:
                    heapq.heapify(deferred)
            elif isinstance(act, AvoidSite):
                avoid[act.site] = act.on
            elif isinstance(act, SetEnabled):
                reps[act.replica].enabled = act.on
            elif isinstance(act, MoveRequests):
                migrations += _move(reps[act.source], reps[act.target], act, t0, links, log)
        # Requests arriving in this tick (and deferred ones released), routed on what was observed at t0.
        end = int(np.searchsorted(arrivals, t1, side="left"))
        batch = list(range(cursor, end))
        cursor = end
        while deferred and deferred[0][0] < t1 and not any(shedding):
            batch.append(heapq.heappop(deferred)[1])
        eligible = [i for i, r in enumerate(reps) if r.enabled and not avoid[r.site]] or \
            [i for i, r in enumerate(reps) if r.enabled] or list(range(len(reps)))
        per: dict[int, list[int]] = {}
        loads = [(reps[i].load() + (reps[i].kv_share() * 8 if routing == "kv_aware" else 0.0), i) for i in eligible]
        heapq.heapify(loads)
        for rid in batch:
            if routing == "round_robin":
                target = eligible[rr % len(eligible)]
                rr += 1
            else:
                load, target = heapq.heappop(loads)
                step = 1.0 + (8.0 * (inp[rid] + out[rid]) / reps[target].cap_kv if routing == "kv_aware" else 0.0)
                heapq.heappush(loads, (load + step, target))
            if shedding[reps[target].site] and sheddable[rid]:
                end_s = max((e.end_s for e in events if e.site == reps[target].site and e.start_s <= t0 < e.end_s),
                            default=t1)
                deferred.append((end_s, rid))
                n_deferred += 1
                continue
            per.setdefault(target, []).append(rid)
        heapq.heapify(deferred)
        for i, rids in per.items():
            r = reps[i]
            for rid in sorted(rids, key=lambda x: arrivals[x]):
                r.advance(max(arrivals[rid], t0))
                r.enqueue(rid)
        for i, r in enumerate(reps):
            r.advance(t1)
            e = r.energy_j
            power[k, r.site] += (e - last_energy[i]) / (t1 - t0)
            last_energy[i] = e
            busy[k] += (r.busy_s - last_busy[i]) / (t1 - t0)
            last_busy[i] = r.busy_s
            tokens[k] += r.tokens_out - last_tokens[i]
            last_tokens[i] = r.tokens_out
            kv[k] += r.kv_share()
            queued[k] += r.load()
        busy[k] /= len(reps)
        kv[k] /= len(reps)
    # Requests still deferred at the horizon were never served.
    log.rejected[[rid for _, rid in deferred]] = True
    energy = float(sum(r.energy_j for r in reps))
    p0 = replicas[0][0]
    return FleetRun(requests, log, inp, tick_s, power, busy, kv, queued, tokens, energy,
                    float(sum(p.gpus_per_replica for p, _ in replicas) * horizon_s), p0.gpu_hour_cost,
                    p0.ttft_objective_s, p0.tpot_objective_s, migrations, n_deferred)


def _move(src: Replica, dst: Replica, act: MoveRequests, t0: float, links, log: Log) -> int:
    """Queued requests move for free; decoding ones leave the source's batch and join the target's once
    their KV cache has crossed (the fabric within a site, the site link between sites)."""
    src.advance(t0)
    dst.advance(t0)
    moved = 0
    for rid in src.take_waiting(act.count):
        dst.enqueue(rid)
        log.migrations[rid] += 1
        moved += 1
    if act.decoding and moved < act.count:
        if src.site == dst.site:
            rate, latency = src.p.fabric_bit_s, FABRIC_LATENCY_S
        else:
            link = (links or {}).get((min(src.site, dst.site), max(src.site, dst.site)))
            rate, latency = (link.bandwidth_bit_s, link.latency_s) if link else (None, 0.0)
        if rate:
            for rid, ctx, _ in src.take_decoding(act.count - moved):
                dst.receive(src.t + latency + ctx * src.p.kv_bits_per_token_replica() / rate, rid, ctx)
                log.migrations[rid] += 1
                moved += 1
    return moved
