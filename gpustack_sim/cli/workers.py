"""The options and progress bar shared by commands whose work runs in chunks (sweep, estimate, resolve
--sample, simulate, experiment run): `--workers N` starts a local Dask cluster, `--scheduler` joins one."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import typer

WorkersOpt = typer.Option(None, "--workers", min=1, help="Run the chunks on a local Dask cluster of N processes "
                          "(the same result for any N).")
SchedulerOpt = typer.Option(None, "--scheduler", help="Run the chunks on an existing Dask cluster: "
                            "tcp://HOST:PORT of its scheduler (docs/scale.md).")


@contextmanager
def chunked(label: str, workers: int | None, scheduler: str | None) -> Iterator[tuple]:
    """(Dask client or None, progress callback): the cluster `--workers`/`--scheduler` ask for, and a rich
    bar on stderr counting chunks done. The bar starts at the first chunk of a run of two or more (a
    refused run prints its one error line and nothing else), only on a terminal, and disappears when done."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from ..distributed.cluster import connect

    console = Console(stderr=True)
    state: dict = {}

    def tick(done: int, total: int) -> None:
        if "bar" not in state:
            if total < 2 or not console.is_terminal:
                return
            bar = state["bar"] = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                          TimeElapsedColumn(), console=console, transient=True)
            bar.start()
            state["task"] = bar.add_task(f"{label} (chunks)", total=total)
        state["bar"].update(state["task"], completed=done)

    with connect(workers, scheduler) as client:
        try:
            yield client, tick
        finally:
            if "bar" in state:
                state["bar"].stop()
