"""The catalog's files and their content hash: the key for every cache (kept free of heavy imports,
because a warm run does nothing else)."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path


def catalog_files(root: Path) -> list[Path]:
    """Every entry named *.yaml or *.yml, files or not: a directory, FIFO or symbolic link loop so named is
    reported by the loader rather than skipped in silence."""
    return sorted(p for p in root.rglob("*") if p.suffix in (".yaml", ".yml"))


def content_hash(root: Path, extra: str = "") -> tuple[str, dict[str, str]]:
    """sha256 over every catalog file's path and bytes: the key for every cache."""
    per_file = {}
    for path in catalog_files(root):
        per_file[path.relative_to(root).as_posix()] = _digest(path)
    h = hashlib.sha256(extra.encode())
    for rel, digest in sorted(per_file.items()):
        h.update(f"{rel}\0{digest}\n".encode())
    return h.hexdigest(), per_file


def _digest(path: Path) -> str:
    """sha256 of a regular file, read in chunks; of what the entry is otherwise (never opened: a FIFO would
    block), so the loader, which reports it, runs again when it changes."""
    try:
        st = os.stat(path)
        if stat.S_ISREG(st.st_mode):
            with open(path, "rb") as fh:
                return hashlib.file_digest(fh, "sha256").hexdigest()
        kind = f"mode {stat.S_IFMT(st.st_mode):o} size {st.st_size}"
    except OSError as exc:
        kind = f"error {exc.errno}"
    return hashlib.sha256(f"not a regular file: {kind}".encode()).hexdigest()
