"""Relations parsed into sympy, kept between runs of the command line.

Turning a relation's text into sympy is most of what a resolution costs (an estimate parses some
400 of them), and every run parsed them again. The parsed expressions are pickled in the build
cache, in a file named by the manifest's catalog hash and by the code that parses them, and read
back on first use with sympy's evaluation off: they were pickled in canonical form, so rebuilding
them unevaluated gives identical objects at a tenth of the cost of parsing.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import sys
from pathlib import Path

PARSING_CODE = ("expressions.py", "symbolic.py", "units.py")  # in gpustack_compiler.language: what builds the expressions


def cache_file(cache_dir: Path, catalog_hash: str) -> Path:
    """The pickle for this catalog, this parsing code, this sympy and this Python."""
    import sympy

    from gpustack_compiler import language

    code = Path(language.__file__).parent
    digest = hashlib.sha256(f"{sympy.__version__} {sys.version_info[:2]}".encode())
    for name in PARSING_CODE:
        digest.update((code / name).read_bytes())
    digest.update(Path(__file__).read_bytes())
    return cache_dir / f"parsed-{catalog_hash[:16]}-{digest.hexdigest()[:16]}.pickle"


class ParsedRelations(dict):
    """(relation, part) -> sympy expression: the resolver's memo, read from `path` on first use and
    written back by `save` when it has grown. Without a path it is a plain memo."""

    def __init__(self, path: Path | None = None):
        super().__init__()
        self.path = path
        self._loaded = path is None
        self._saved = 0

    # Every way of looking a key up reads the file first (setting one does not need it).
    def get(self, key, default=None):
        if not self._loaded:
            self._load()
        return super().get(key, default)

    def __getitem__(self, key):
        if not self._loaded:
            self._load()
        return super().__getitem__(key)

    def __contains__(self, key) -> bool:
        if not self._loaded:
            self._load()
        return super().__contains__(key)

    def _load(self) -> None:
        from sympy.core.parameters import evaluate

        self._loaded = True
        try:
            with evaluate(False):
                stored = pickle.loads(self.path.read_bytes())
        except Exception:  # noqa: BLE001 - missing, stale or damaged: parse again and rewrite it
            return
        self.update(stored)
        self._saved = len(self)

    def save(self) -> None:
        """Write the memo for the next run if it grew; a build directory that cannot be written only
        costs the next run its parsing."""
        if self.path is None or len(self) <= self._saved:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            for old in self.path.parent.glob("parsed-*.pickle"):
                if old != self.path:
                    old.unlink(missing_ok=True)
            tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
            tmp.write_bytes(pickle.dumps(dict(self), protocol=pickle.HIGHEST_PROTOCOL))
            tmp.replace(self.path)  # atomic: a concurrent reader sees the old file or the new one
        except OSError:
            return
        self._saved = len(self)
