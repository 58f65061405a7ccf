"""Work cut into chunks, each with its own seed, run in this process or on a Dask cluster.

A chunk's boundaries and seed depend on the run (its size, its seed, the chunk index), never on how many
workers there are, and results come back in chunk order: the same run gives the same bytes on one process,
two local workers or a cluster. The engine takes a `dask.distributed.Client` (or none); `cluster.connect`
makes one for the command line's `--workers` and `--scheduler`.
"""

from __future__ import annotations

from .chunks import Backend, chunk_ranges, chunk_seed

__all__ = ["Backend", "chunk_ranges", "chunk_seed"]
