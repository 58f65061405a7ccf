"""The catalog's files and their content hash: the key for every cache (kept free of heavy imports,
because a warm run does nothing else)."""

from __future__ import annotations

import hashlib
from pathlib import Path


def catalog_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file() and p.suffix in (".yaml", ".yml"))


def content_hash(root: Path, extra: str = "") -> tuple[str, dict[str, str]]:
    """sha256 over every catalog file's path and bytes: the key for every cache."""
    per_file = {}
    for path in catalog_files(root):
        per_file[path.relative_to(root).as_posix()] = hashlib.sha256(path.read_bytes()).hexdigest()
    h = hashlib.sha256(extra.encode())
    for rel, digest in sorted(per_file.items()):
        h.update(f"{rel}\0{digest}\n".encode())
    return h.hexdigest(), per_file
