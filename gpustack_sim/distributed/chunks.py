"""Chunks, their seeds, and the backend that maps a function over them."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from distributed import Client

Progress = Callable[[int, int], None]  # (chunks done, chunks in all)


def chunk_ranges(total: int, size: int) -> list[tuple[int, int]]:
    """[start, stop) of each chunk of `size` items (the last one shorter)."""
    return [(start, min(start + size, total)) for start in range(0, total, size)]


def chunk_seed(entropy: int | Sequence[int], chunk: int) -> np.random.SeedSequence:
    """The seed of chunk `chunk` of a run seeded with `entropy`: the root sequence for chunk 0 (so a run of
    one chunk draws as an unchunked one), its spawn key (chunk,) after that. Spawn keys never collide with
    the entropy, whatever it is."""
    return np.random.SeedSequence(entropy, spawn_key=(chunk,) if chunk else ())


class Backend:
    """Maps `fn(shared, chunk)` over chunks: here, or on the Dask cluster of `client`. `shared` (the compiled
    model, parameters) is sent to each worker once."""

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

        remote = self.client.scatter(shared, broadcast=True)
        futures = self.client.map(fn, [remote] * total, chunks, pure=False)
        index = {f.key: i for i, f in enumerate(futures)}
        results: list = [None] * total
        try:
            for k, future in enumerate(as_completed(futures, loop=self.client.loop), 1):
                results[index[future.key]] = future.result()
                future.release()
                if progress:
                    progress(k, total)
        finally:
            self.client.cancel(futures)
        return results
