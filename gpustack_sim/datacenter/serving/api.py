"""`simulate_serving`: replications of a serving fleet, each with its own seed spawned from the caller's,
on common request streams across policies (replication i draws the same requests whatever the policy)."""

from __future__ import annotations

import math

import numpy as np

from gpustack_compiler.base.errors import InputError

from ...distributed import Backend, chunk_ranges
from ..sites import Sites
from .control import Controller, GridEvent
from .fleet import FleetRun, SiteLink, replay
from .parameters import ReplicaParameters
from .replica import PAGED
from .results import ServingResult
from .workloads import Family, Requests

MAX_HOURS = 24 * 7
REPLICATION_CHUNK = 2


def fleet_layout(params: ReplicaParameters, sites: Sites | None, gpus: int | None
                 ) -> tuple[list[tuple[ReplicaParameters, int]], tuple[str, ...], dict]:
    """Replicas over the sites: the run's replicas (or `gpus` worth of them) on one site, or spread over a
    sites file's sites in proportion to their accelerators."""
    count = params.replicas if gpus is None else gpus // params.gpus_per_replica
    if count < 1:
        raise InputError(f"--gpus: {gpus} GPUs hold no replica of {params.gpus_per_replica} GPUs")
    if sites is None:
        return [(params, 0)] * count, ("site",), {}
    total = sum(s.accelerators for s in sites.sites)
    per = [max(0, (s.accelerators * count) // total) for s in sites.sites]
    per[0] += count - sum(per)
    replicas = [(params, k) for k, n in enumerate(per) for _ in range(n)]
    names = tuple(s.name for s in sites.sites)
    links = {}
    for ln in sites.links:
        a, b = names.index(ln.a), names.index(ln.b)
        links[(min(a, b), max(a, b))] = SiteLink(ln.bandwidth_bit_s, ln.latency_s)
    return replicas, names, links


def grid_events(sites: Sites | None, names: tuple[str, ...], horizon_s: float,
                bid_share: float | None) -> tuple[GridEvent, ...]:
    """A sites file's grid signals inside the horizon as dispatches: the bid is the share of the site's
    grid limit the signal takes away (or `bid_share` of its draw when given)."""
    if sites is None:
        return ()
    events = []
    for k, s in enumerate(sites.sites):
        for sig in s.signals:
            if sig.kind != "grid" or sig.start_ns / 1e9 >= horizon_s:
                continue
            share = bid_share if bid_share is not None else max(0.0, 1 - sig.limit_w / s.grid_limit_w)
            events.append(GridEvent(k, sig.start_ns / 1e9, sig.end_ns / 1e9, share))
    return tuple(events)


def simulate_serving(params: ReplicaParameters, family: Family, *, run_name: str, run_lengths: dict,
                     load_curve: list[float] | None, context: int, hours: float, rate: float | None = None,
                     routing: str = "least_loaded", controller: Controller | None = None, sites: Sites | None = None,
                     gpus: int | None = None, seed: int = 0, replications: int = 1, tick_s: float = 1.0,
                     admission: str = PAGED, sheddable_share: float = 0.0, bid_share: float | None = None,
                     backend: Backend | None = None, progress=None) -> ServingResult:
    if not (isinstance(hours, (int, float)) and math.isfinite(hours) and hours > 0):
        raise InputError(f"--hours: {hours!r} is not positive")
    if hours > MAX_HOURS:
        raise InputError(f"--hours: {hours:g} is over the limit of {MAX_HOURS} hours of serving to replay")
    if replications < 1:
        raise InputError(f"--replications: {replications} is not a positive count")
    if rate is not None and not (math.isfinite(rate) and rate > 0):
        raise InputError(f"--rate: {rate!r} requests/s is not positive")
    if not (math.isfinite(tick_s) and tick_s > 0):
        raise InputError(f"tick: {tick_s!r} s is not positive")
    replicas, names, links = fleet_layout(params, sites, gpus)
    horizon = hours * 3600.0
    events = grid_events(sites, names, horizon, bid_share)
    lam = params.request_rate if rate is None else rate
    seeds = np.random.SeedSequence(seed).spawn(replications)
    shared = (family, lam, horizon, run_lengths, load_curve, context, sheddable_share, replicas, routing,
              controller, events, tick_s, admission, links, len(names))
    chunks = [seeds[a:b] for a, b in chunk_ranges(replications, REPLICATION_CHUNK)]
    parts = (backend or Backend()).map(_replay, shared, chunks, progress)
    runs = [r for part in parts for r in part]
    result = ServingResult.from_runs(runs, horizon, run_name=run_name, family=family.name, routing=routing,
                                     seed=seed, hours=hours, replicas=len(replicas),
                                     gpus=sum(p.gpus_per_replica for p, _ in replicas), sites=names)
    clipped = sum(r.requests.clipped for r in runs)
    if clipped:
        result.notes.append(f"{clipped} request(s) over all replications shortened to the model's context of "
                            f"{context} tokens")
    if params.gpu_memory_bound_w is None or params.gpu_light_w is None:
        result.notes.append("no decode power measurement among the run's presets: busy and idle GPUs draw the "
                            "board limit (an upper bound)")
    result.notes.append("an idle GPU draws the lightest decode load's power (no idle measurement): energy is an "
                        "upper bound at low load")
    return result


def draw_requests(family: Family, lam: float, horizon: float, run_lengths: dict, load_curve, context: int,
                  seed: np.random.SeedSequence, sheddable_share: float = 0.0) -> Requests:
    """Replication i's request stream: its own generator, whatever the policy (common random numbers)."""
    return family.generate(lam, horizon, run_lengths, load_curve, context, np.random.default_rng(seed),
                           sheddable_share)


def _replay(shared, seeds) -> list[FleetRun]:
    (family, lam, horizon, run_lengths, load_curve, context, shed, replicas, routing, controller, events, tick,
     admission, links, n_sites) = shared
    out = []
    for s in seeds:
        reqs = draw_requests(family, lam, horizon, run_lengths, load_curve, context, s, shed)
        ctrl = None if controller is None else controller.fresh()
        out.append(replay(replicas, reqs, horizon, routing=routing, controller=ctrl, events=events, tick_s=tick,
                          admission=admission, links=links, n_sites=n_sites))
    return out
