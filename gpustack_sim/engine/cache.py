"""Relations parsed into sympy, and the symbolic models resolved from them, kept between runs of the
command line.

Turning a relation's text into sympy is most of what a resolution costs (an estimate parses some
400 of them), and every run parsed them again. The parsed expressions are pickled in the build
cache, in a file named by the manifest's catalog hash and by the code that parses them, and read
back on first use with sympy's evaluation off: they were pickled in canonical form, so rebuilding
them unevaluated gives identical objects at a tenth of the cost of parsing.

The same memo keeps what is resolved from a run, under `run_key`s: a sweep's numeric model (its
objective, memory and open conditions resolved with the layout left symbolic, compiled) and an estimate's
resolutions, most of either's cost. The file's name then also covers the code that resolves, and only
the newest KEPT_RESULTS of them are written back, so that the file read by every command stays small.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

PARSING_CODE = ("expressions.py", "symbolic.py", "units.py")  # in gpustack_compiler.language: what builds the expressions
# What resolves the stored models: the relation kinds (gpustack_compiler/language/kinds) and, in gpustack_sim, these.
RESOLVING_CODE = ("engine/resolver.py", "analyses/sweep.py", "analyses/uncertainty.py")
RESULT = "result"  # the first part of a run_key; the keys of parsed relations are (relation, part)
KEPT_RESULTS = 48


def run_key(kind: str, scenario, names: Sequence[str], *more) -> tuple[str, str, str]:
    """The memo key of what `kind` resolves for `names` from `scenario` (every assignment with its origin,
    which traces show, the variants, modes and held names): the catalog and the code name the file."""
    text = repr((list(names), sorted((k, repr(a)) for k, a in scenario.assignments.items()),
                 sorted(scenario.variants.items()), list(scenario.presets), list(scenario.modes),
                 sorted(scenario.sampled), more))
    return RESULT, kind, hashlib.sha256(text.encode()).hexdigest()


def remembered(memo: dict, key: tuple, compute: Callable[[], object], keep: Callable[[object], bool] = bool):
    """`compute()`, or what it gave when this key was computed before (in this process or, through the
    build cache, an earlier one); a value `keep` refuses is not remembered."""
    value = memo.get(key)
    if value is None:
        value = compute()
        if keep(value):
            memo[key] = value
    return value


def cache_file(cache_dir: Path, catalog_hash: str) -> Path:
    """The pickle for this catalog, this parsing code, this sympy and this Python."""
    import sympy

    from gpustack_compiler import language

    code = Path(language.__file__).parent
    digest = hashlib.sha256(f"{sympy.__version__} {sys.version_info[:2]}".encode())
    for name in PARSING_CODE:
        digest.update((code / name).read_bytes())
    for path in sorted((code / "kinds").glob("*.py")):
        digest.update(path.read_bytes())
    engine = Path(__file__).resolve().parent.parent
    for name in RESOLVING_CODE:
        digest.update((engine / name).read_bytes())
    digest.update(Path(__file__).read_bytes())
    return cache_dir / f"parsed-{catalog_hash[:16]}-{digest.hexdigest()[:16]}.pickle"


class ParsedRelations(dict):
    """(relation, part) -> sympy expression, and run_key -> what was resolved from a run: the resolver's
    memo, read from `path` on first use and written back by `save` when it has grown. Without a path it
    is a plain memo. Results are stored pickled one by one and unpickled when first asked for: a command
    reads the file for its relations, and pays only for the results it uses."""

    def __init__(self, path: Path | None = None):
        super().__init__()
        self.path = path
        self._loaded = path is None
        self._packed: dict[tuple, bytes] = {}  # results read from the file, not yet asked for
        self._grown = False

    # Every way of looking a key up reads the file first (setting one does not need it).
    def get(self, key, default=None):
        return self[key] if key in self else default

    def __getitem__(self, key):
        if not self._loaded:
            self._load()
        if key in self._packed:
            from sympy.core.parameters import evaluate

            with evaluate(False):
                super().__setitem__(key, pickle.loads(self._packed.pop(key)))
        return super().__getitem__(key)

    def __contains__(self, key) -> bool:
        if not self._loaded:
            self._load()
        return key in self._packed or super().__contains__(key)

    def __setitem__(self, key, value) -> None:
        super().__setitem__(key, value)
        self._grown = True

    def _load(self) -> None:
        from sympy.core.parameters import evaluate

        self._loaded = True
        try:
            with evaluate(False):
                relations, results = pickle.loads(self.path.read_bytes())
        except Exception:  # noqa: BLE001 - missing, stale or damaged: parse again and rewrite it
            return
        # set under the memo's own entries: they are at least as new
        super().update({k: v for k, v in relations.items() if not dict.__contains__(self, k)})
        self._packed.update({k: v for k, v in results.items() if not dict.__contains__(self, k)})

    def save(self) -> None:
        """Write the memo for the next run if it grew (the newest KEPT_RESULTS results of it); a build
        directory that cannot be written only costs the next run its parsing."""
        if self.path is None or not self._grown:
            return
        try:
            results = {**self._packed, **{k: pickle.dumps(v, protocol=pickle.HIGHEST_PROTOCOL)
                                          for k, v in self.items() if k[0] == RESULT}}
            kept = dict(list(results.items())[-KEPT_RESULTS:])  # the oldest first: read, then computed
            relations = {k: v for k, v in self.items() if k[0] != RESULT}
            self.path.parent.mkdir(parents=True, exist_ok=True)
            for old in self.path.parent.glob("parsed-*.pickle"):
                if old != self.path:
                    old.unlink(missing_ok=True)
            tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
            tmp.write_bytes(pickle.dumps((relations, kept), protocol=pickle.HIGHEST_PROTOCOL))
            tmp.replace(self.path)  # atomic: a concurrent reader sees the old file or the new one
        except OSError:
            return
        self._grown = False
