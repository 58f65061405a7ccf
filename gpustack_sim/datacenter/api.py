"""`simulate`: replications of one job, each with its own seed spawned from the caller's."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

import numpy as np

from gpustack_compiler.base.errors import InputError
from gpustack_compiler.base.limits import (
    MAX_FAILURES_WITHOUT_PROGRESS,
    MAX_REPLICATIONS,
    MAX_SIMULATED_DAYS,
    refuse_over,
)

from ..distributed import Backend, chunk_ranges
from ..distributed.chunks import Progress
from .events import to_ns
from .parameters import JobParameters
from .policies import Policy, make_policy
from .results import SimulationResult
from .simulation import Replay, Replication
from .sites import Placement, Sites, place, single_site, storage_write_s

SECONDS_PER_DAY = 86400
# What a change of parallel layout leaves as it is: the work, the nodes, and the parts that can fail.
SAME_IN_EVERY_LAYOUT = ("tokens_per_step", "token_budget", "nodes", "gpus_per_node", "failure_classes")
# Replications per chunk sent to a worker: enough to outweigh sending it, few enough to spread 100 of them.
REPLICATION_CHUNK = 8


def simulate(params: JobParameters, *, sites: Sites | None = None, policy: str | Policy = "daly", seed: int = 0,
             replications: int = 1, days: float | None = None, to_budget: bool = True,
             interval_s: float | None = None, backend: Backend | None = None, log_replications: int = 1,
             progress: Progress | None = None,
             layouts: Mapping[str, JobParameters] | None = None) -> SimulationResult:
    """Replay the job `replications` times, in chunks of REPLICATION_CHUNK on `backend` (this process by
    default). Replication i uses the i-th child of SeedSequence(seed), so every replication is the same
    whatever the order or the number of workers. `progress(done, total)` hears of chunks done.

    `layouts`: alternative parallel layouts of the same job (name -> its JobParameters) a policy may switch
    to (`SetLayout`); they must train the same batch and budget on the same nodes and parts. The job starts
    with `params` (its name is the key whose parameters equal it, if any)."""
    if replications < 1:
        raise InputError(f"replications: {replications} is not a positive count")
    if days is None and not to_budget:
        raise InputError("simulate: give days or to_budget")
    if days is not None and not days > 0:
        raise InputError(f"days: {days!r} is not positive")
    refuse_over(replications, MAX_REPLICATIONS, "--replications")
    # Every simulated day adds events to the log: the horizon is bounded, whichever way it is given.
    refuse_over(horizon_s(params, days) / SECONDS_PER_DAY, MAX_SIMULATED_DAYS, "days of wallclock to simulate"
                if days is not None else "days of wallclock to simulate to the token budget (without failures)")
    if interval_s is not None and days is None:
        refuse_hopeless_interval(params, interval_s)
    chosen = policy if not isinstance(policy, str) else make_policy(
        policy, params.checkpoint_blocking_s, params.job_mtbf_s,
        interval_s if interval_s is not None else params.checkpoint_interval_s)
    placement = single_site(params.nodes) if sites is None else place(
        sites, params.nodes, params.gpus_per_node, params.model_sync_bits)
    horizon = None if days is None else to_ns(days * SECONDS_PER_DAY)
    layouts = dict(layouts or {})
    if sites is not None:
        # A checkpoint written faster than the catalog's storage allows is not written faster than the site's.
        write_s = storage_write_s(sites, placement, params.nodes, params.checkpoint_bits)
        if write_s > params.checkpoint_write_s:
            params = dataclasses.replace(params, checkpoint_write_s=write_s)
            layouts = {name: dataclasses.replace(lp, checkpoint_write_s=write_s) for name, lp in layouts.items()}
    for name, lp in layouts.items():
        for fld in SAME_IN_EVERY_LAYOUT:
            if getattr(lp, fld) != getattr(params, fld):
                raise InputError(f"layouts: {name}: {fld} {getattr(lp, fld)!r} differs from the job's "
                                 f"{getattr(params, fld)!r}", "a layout changes how the same job is parallelised")
    if not to_budget:
        # A replay over a horizon trains past the budget: give it more steps than the horizon can hold.
        steps = math.ceil(days * SECONDS_PER_DAY / min(p.step_time_s for p in (params, *layouts.values()))) + 1
        budget = max(params.token_budget, steps * params.tokens_per_step)
        layouts = {name: dataclasses.replace(lp, token_budget=budget) for name, lp in layouts.items()}
        params = dataclasses.replace(params, token_budget=budget)
    seeds = np.random.SeedSequence(seed).spawn(replications)
    shared = (params, placement, chosen, horizon, layouts)
    chunks = [[(seeds[i], i < log_replications) for i in range(a, b)]
              for a, b in chunk_ranges(replications, REPLICATION_CHUNK)]
    parts = (backend or Backend()).map(_replay, shared, chunks, progress)
    runs = [r for part in parts for r in part]
    return SimulationResult.from_replications(params, placement, chosen.name, seed, days, runs, layouts)


def horizon_s(params: JobParameters, days: float | None = None) -> float:
    """The wallclock a replay covers: `days`, or the time to the token budget without failures (a lower bound)."""
    if days is not None:
        return days * SECONDS_PER_DAY
    return params.token_budget / params.tokens_per_step * params.step_time_s


def refuse_hopeless_interval(params: JobParameters, interval_s: float) -> None:
    """InputError when a fixed checkpoint interval of `interval_s` expects more than
    MAX_FAILURES_WITHOUT_PROGRESS failures before its first checkpoint completes: with failures at rate
    1/MTBF, the stretch from one checkpoint to the next (the interval and its write, or the whole run when that
    is shorter) ends before a failure with probability exp(-stretch/MTBF), so it takes exp(stretch/MTBF) - 1
    failures on average. Such a replay would roll back to its start for ever."""
    if not interval_s > 0 or not math.isfinite(interval_s):
        raise InputError(f"--interval: {interval_s!r} s is not a positive finite number")
    stretch = min(interval_s + params.checkpoint_write_s, horizon_s(params))
    if params.job_mtbf_s > 0 and stretch / params.job_mtbf_s > math.log1p(MAX_FAILURES_WITHOUT_PROGRESS):
        raise InputError(f"--interval: {interval_s:,.6g} s cannot complete a checkpoint before the next failure: "
                         f"the job fails every {params.job_mtbf_s:,.6g} s on average, so a checkpoint every "
                         f"{stretch:,.6g} s expects e^{stretch / params.job_mtbf_s:,.3g} failures first, over the "
                         f"limit of {MAX_FAILURES_WITHOUT_PROGRESS:,}",
                         "use an interval well below the mean time between failures, or --policy daly")


def _replay(shared: tuple[JobParameters, Placement, Policy, int | None, dict[str, JobParameters]],
            chunk: list[tuple[np.random.SeedSequence, bool]]) -> list[Replication]:
    params, placement, policy, horizon, layouts = shared
    return [Replay(params, placement, policy, s, horizon, log, layouts).run() for s, log in chunk]
