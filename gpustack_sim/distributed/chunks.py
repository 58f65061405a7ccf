"""Chunks, their seeds, and the backend that maps a function over them."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from distributed import Client

Progress = Callable[[int, int], None]  # (chunks done, chunks in all)

# Tasks per worker thread: enough to even out chunks of unequal length (a simulation's replications differ),
# few enough that the scheduler's few milliseconds per task stay small beside the work when chunks take tens
# of milliseconds (a fast sweep's do).
TASKS_PER_THREAD = 16


def chunk_ranges(total: int, size: int) -> list[tuple[int, int]]:
    """[start, stop) of each chunk of `size` items (the last one shorter)."""
    return [(start, min(start + size, total)) for start in range(0, total, size)]


def chunk_seed(entropy: int | Sequence[int], chunk: int) -> np.random.SeedSequence:
    """The seed of chunk `chunk` of a run seeded with `entropy`: the root sequence for chunk 0 (so a run of
    one chunk draws as an unchunked one), its spawn key (chunk,) after that. Spawn keys never collide with
    the entropy, whatever it is."""
    return np.random.SeedSequence(entropy, spawn_key=(chunk,) if chunk else ())


class Backend:
    """Maps `fn(shared, chunk)` over chunks: here, or on the Dask cluster of `client`, up to TASKS_PER_THREAD
    runs of consecutive chunks per worker thread, one task each. `shared` (the compiled model, parameters) is
    sent to each worker once."""

    def __init__(self, client: Client | None = None):
        self.client = client

    def map(self, fn: Callable[[Any, Any], Any], shared: Any, chunks: Sequence, progress: Progress | None = None,
            ) -> list:
        """`fn(shared, c)` for every chunk `c`, in chunk order."""
        total = len(chunks)
        if progress:
            progress(0, total)
        if self.client is None or total < 2:
            results = []
            for k, chunk in enumerate(chunks, 1):
                results.append(fn(shared, chunk))
                if progress:
                    progress(k, total)
            return results
        from distributed import as_completed

        threads = max(1, sum(self.client.nthreads().values()))
        batches = _batches(list(chunks), threads * TASKS_PER_THREAD)
        remote = self.client.scatter(shared, broadcast=True)
        futures = self.client.map(_each, [fn] * len(batches), [remote] * len(batches), batches, pure=False)
        index = {f.key: i for i, f in enumerate(futures)}
        results: list = [None] * len(batches)
        done = 0
        try:
            for future in as_completed(futures, loop=self.client.loop):
                i = index[future.key]
                results[i] = future.result()
                future.release()
                done += len(batches[i])
                if progress:
                    progress(done, total)
        finally:
            self.client.cancel(futures)
        return [r for batch in results for r in batch]


def _batches(items: list, n: int) -> list[list]:
    """`items` cut into at most `n` runs of consecutive items whose lengths differ by at most one."""
    n = min(n, len(items))
    size, extra = divmod(len(items), n)
    cuts = [k * size + min(k, extra) for k in range(n + 1)]
    return [items[a:b] for a, b in zip(cuts, cuts[1:])]


def _each(fn: Callable[[Any, Any], Any], shared: Any, batch: list) -> list:
    """One task: `fn(shared, c)` for each chunk of a batch, in order."""
    return [fn(shared, chunk) for chunk in batch]
