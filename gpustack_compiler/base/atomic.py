"""Files written whole or not at all: a reader never sees half a manifest, artifact, log or plot, and an
error leaves the previous file in place."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
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
