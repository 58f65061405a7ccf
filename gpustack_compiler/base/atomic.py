"""Files and folders written whole or not at all: a reader never sees half a manifest, artifact, log, plot,
site or simulation folder, and an error (or a kill) leaves the previous one in place."""

from __future__ import annotations

import ctypes
import errno
import glob
import hashlib
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path


def write_atomic(path: Path, write: Callable[[str], object], make_dirs: bool = True) -> None:
    """`write(tmp)` fills a temporary file beside `path`, which then replaces `path` in one step. Without
    `make_dirs`, a missing folder is the caller's error (FileNotFoundError), as for a file a user named."""
    path = Path(path)
    if make_dirs:
        path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    os.close(fd)
    try:
        write(tmp)
        os.chmod(tmp, 0o644)  # mkstemp makes it private; these files are meant to be shared
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def write_text(path: Path, text: str) -> bool:
    """Write `text` atomically; False (and nothing written) when the file already holds exactly it."""
    path = Path(path)
    if path.is_file() and path.read_text(encoding="utf-8") == text:
        return False
    write_atomic(path, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))
    return True


def write_folder(path: Path, fill: Callable[[Path], object]) -> None:
    """`fill(tmp)` writes a whole folder into a temporary one beside `path`, which then takes the place of
    `path` in one step (an exchange of the two names where the kernel offers it, else two renames); the
    previous folder is removed only after. Temporary folders a killed writer left behind are removed first."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    _remove_orphans(path)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.{os.getpid()}.", dir=path.parent))
    try:
        fill(tmp)
        os.chmod(tmp, 0o755)  # mkdtemp makes it private; the folder is meant to be shared
        if not path.exists():
            os.rename(tmp, path)
            return
        if not _exchange(tmp, path):
            old = tmp.with_name(tmp.name + ".old")
            os.rename(path, old)
            os.rename(tmp, path)
            tmp = old
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    shutil.rmtree(tmp)  # the previous folder, now under the temporary name


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths atomically with renameat2(RENAME_EXCHANGE) (Linux 3.15+); False where it is missing."""
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.EPERM):  # a file system or sandbox without the exchange
        return False
    raise OSError(code, os.strerror(code), str(b))


def _remove_orphans(path: Path) -> None:
    """Temporary folders of `path` whose writer (the pid in their name) is no longer running."""
    for tmp in path.parent.glob(f".{glob.escape(path.name)}.*"):
        pid = tmp.name[len(path.name) + 2:].split(".", 1)[0]
        if tmp.is_dir() and pid.isdigit() and not _running(int(pid)):
            shutil.rmtree(tmp, ignore_errors=True)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def digests(folder: Path, names: Iterable[str]) -> dict[str, str]:
    """sha256 of each named file in `folder`: what a folder's index file records of its companions."""
    return {name: hashlib.sha256((Path(folder) / name).read_bytes()).hexdigest() for name in sorted(names)}


def mismatched(folder: Path, recorded: dict[str, str]) -> list[str]:
    """The files whose bytes are not the ones `recorded` (missing files included)."""
    folder = Path(folder)
    return [name for name, digest in sorted(recorded.items())
            if not (folder / name).is_file() or hashlib.sha256((folder / name).read_bytes()).hexdigest() != digest]
