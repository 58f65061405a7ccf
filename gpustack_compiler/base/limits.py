"""Resource limits on untrusted input, in one place: every size a user or a contributor controls is
checked against one of these before the work it implies is started, so a hostile or mistaken input is
refused with its size named instead of exhausting memory. Raising a limit (once the work streams) is an
edit here alone.

The figures keep every command under about 1 GB of memory on the inputs they bound (measured with
benchmarks/fuzz.py)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from .errors import InputError

MiB = 1 << 20

# One catalog file (catalog/**/*.yaml): the largest shipped one is about 0.1 MB; a file of 100,000
# generated variables (about 15 MB) took over 20 s to check, one of 2 MiB (13,000 variables) 24 s on
# this loaded 2-core machine. A larger catalog grows by files, as the synthetic ones do (500 variables each).
MAX_CATALOG_FILE_BYTES = 1 * MiB
# A user document: run file, sites file, observation file, protocol.
MAX_DOCUMENT_BYTES = 1 * MiB
# A validation or calibration CSV (one resolution per row).
MAX_CSV_BYTES = 1 * MiB
# Monte Carlo draws per run (`--samples`): every sampled input and intermediate is an array of this length.
MAX_SAMPLES = 1_000_000
# Layouts in one sweep (the product of the grid's axes). The grid streams through in chunks, so memory is
# bounded by the chunk whatever its size; the bound is time: 10^10 layouts at about 10^6 per second and core.
MAX_GRID_LAYOUTS = 10**10
# Valid layouts a sweep keeps (`--top`; `--plot` keeps every valid one): they are held as rows at once.
MAX_KEPT_LAYOUTS = 2_000_000

# Wallclock one simulation replays (`simulate --days`, or the time to the token budget): its event log
# grows with it. Ten years: the longest training runs take months.
MAX_SIMULATED_DAYS = 3650
# Replications of one simulation (`--replications` on simulate, experiment run, observatory build): each keeps
# its figures and failure times, about 3 KB (20,000 of the 1,024-GPU run: 71 s, 175 MB peak on 2 loaded cores).
MAX_REPLICATIONS = 100_000
# Bins of one power series (`simulate --power-resolution`): each is a row of power.parquet and a few hundred
# bytes of Python lists while it is built.
MAX_POWER_BINS = 1_000_000
# Failures in a row after which a replay that has not advanced its checkpoint stops with a finding (an interval
# that cannot complete a checkpoint before the next failure never trains). A healthy policy completes a
# checkpoint between most failures: a thousand without one is not a run of bad luck.
MAX_FAILURES_WITHOUT_PROGRESS = 1000
# Local Dask worker processes per core (`--workers`): more only contend for the cores and multiply memory
# (about 100 MB each); a larger cluster is joined with --scheduler.
MAX_LOCAL_WORKERS_PER_CORE = 2


def max_local_workers() -> int:
    return MAX_LOCAL_WORKERS_PER_CORE * (os.cpu_count() or 1)


def refuse_over(count: float, limit: float, what: str, hint: str | None = None) -> None:
    """InputError naming `count` when it exceeds `limit` (or is not a number)."""
    if not count <= limit:
        shown = f"{count:,}" if isinstance(count, int) else f"{count:,.6g}"
        raise InputError(f"{what}: {shown} is over the limit of {limit:,}", hint)


class FileProblem(Exception):
    """Why a file cannot be read as text, at a line (1 unless the problem is a byte inside it)."""

    def __init__(self, reason: str, line: int = 1):
        super().__init__(reason)
        self.reason = reason
        self.line = line


def load_text(path: Path, limit: int, encoding: str = "utf-8") -> str:
    """The text of `path`; FileProblem unless it is a regular file of at most `limit` bytes in `encoding`.
    Checked before it is opened: a FIFO or device would block or never end, a symbolic link loop or a
    directory cannot be read, a huge file would take the memory and time its size implies."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise FileProblem("a dangling symbolic link" if os.path.islink(path) else "not found") from None
    except OSError as exc:  # ELOOP (a symbolic link loop), EACCES, ...
        raise FileProblem(exc.strerror or str(exc)) from None
    if stat.S_ISDIR(st.st_mode):
        raise FileProblem("a directory, not a file")
    if not stat.S_ISREG(st.st_mode):
        raise FileProblem("not a regular file (a FIFO, socket or device)")
    if st.st_size > limit:
        raise FileProblem(f"{st.st_size:,} bytes, over the limit of {limit:,}")
    try:
        with open(path, "rb") as fh:
            data = fh.read(limit + 1)  # it may have grown since it was measured
    except OSError as exc:
        raise FileProblem(exc.strerror or str(exc)) from None
    if len(data) > limit:
        raise FileProblem(f"over the limit of {limit:,} bytes")
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as exc:
        raise FileProblem(f"not UTF-8 text (byte {data[exc.start]:#04x} at offset {exc.start})",
                          data[:exc.start].count(b"\n") + 1) from None


def read_text(path: Path, limit: int, what: str, shown: str | None = None, encoding: str = "utf-8") -> str:
    """`load_text` for a file a user named: every problem is an InputError naming the file, line and size."""
    try:
        return load_text(path, limit, encoding)
    except FileProblem as exc:
        raise InputError(f"{shown or path}:{exc.line}: cannot read {what}: {exc.reason}") from None
