"""A map over items on every core, in forked worker processes that inherit the parent's state (nothing
is pickled on the way in, only results on the way back). Results come back in order: the same as a
serial map. Used where a cold compile of a large catalog spends its time (YAML, sympy forms)."""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Sequence

_STATE: tuple[Callable, Sequence] | None = None
MAX_WORKERS = 4


def cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def can_fork() -> bool:
    """A daemonic process (a Dask worker, a pool's worker) may not have children: it maps serially."""
    return (cores() > 1 and "fork" in multiprocessing.get_all_start_methods()
            and not multiprocessing.current_process().daemon)


def _call(index: int):
    fn, items = _STATE
    return fn(items[index])


def fork_map(fn: Callable, items: Sequence, chunksize: int = 1) -> list:
    """[fn(x) for x in items], on min(cores, MAX_WORKERS) forked processes (check can_fork first)."""
    global _STATE
    _STATE = (fn, items)
    try:
        with multiprocessing.get_context("fork").Pool(min(cores(), MAX_WORKERS)) as pool:
            return pool.map(_call, range(len(items)), chunksize=chunksize)
    finally:
        _STATE = None
