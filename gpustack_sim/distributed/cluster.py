"""The Dask client behind `--workers N` (a local cluster of N single-threaded processes) and
`--scheduler tcp://HOST:PORT` (an existing cluster)."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from gpustack_compiler.base.errors import InfrastructureError, InputError
from gpustack_compiler.base.limits import max_local_workers, refuse_over

if TYPE_CHECKING:
    from distributed import Client

# Seconds to reach an existing scheduler before giving up.
CONNECT_TIMEOUT_S = 10


@contextmanager
def connect(workers: int | None = None, scheduler: str | None = None) -> Iterator[Client | None]:
    """No client (this process alone) when neither is given; the local cluster or the scheduler otherwise,
    closed on exit."""
    if workers is not None and scheduler is not None:
        raise InputError("--workers and --scheduler exclude each other",
                         "--workers starts a local cluster; --scheduler joins an existing one")
    if workers is not None and workers < 1:
        raise InputError(f"--workers {workers}: at least 1")
    if workers is not None:
        refuse_over(workers, max_local_workers(), f"--workers (local processes on {os.cpu_count() or 1} core(s))",
                    "join a larger cluster with --scheduler")
    if workers is None and scheduler is None:
        yield None
        return
    import dask
    from distributed import Client, LocalCluster

    if scheduler is not None:
        try:
            client = Client(scheduler, timeout=CONNECT_TIMEOUT_S)
        except (OSError, TimeoutError, ValueError) as exc:
            raise InfrastructureError(f"--scheduler {scheduler}: cannot reach the Dask scheduler ({exc})",
                                      "start one with `dask scheduler` and workers with `dask worker ADDRESS`"
                                      ) from None
        with client:
            yield client
        return
    # One thread per process: the work is numpy and Python; threads would share one interpreter lock. The
    # scheduler's HTTP endpoint on any free port: another cluster on the machine may hold 8787. Dask gives its
    # workers MALLOC_TRIM_THRESHOLD_, and setting it at all freezes glibc's mmap threshold: every chunk's
    # megabyte-sized temporaries are then mapped and faulted in afresh (a*3+1 on 2^18 integers: 0.6 ms in
    # such a worker, 0.2 ms here). A chunk bounds the memory anyway, so the workers keep glibc's default.
    with dask.config.set({"distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None}), \
            LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=":0",
                         silence_logs=logging.ERROR) as cluster, Client(cluster) as client:
        yield client
