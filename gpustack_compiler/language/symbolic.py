"""sympy forms of catalog expressions (canonical text and LaTeX), cached by content hash.

The cache is private: a JSON file under the build directory keyed by everything that can change
the output (expression text, the assumptions of its symbols, the scales of its unit literals).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

import sympy

from .expressions import Parsed, SympyBuilder

CACHE_VERSION = "1"


def symbol_for(name: str, assumptions: tuple[str, ...]) -> sympy.Symbol:
    return sympy.Symbol(name, **{a: True for a in assumptions})


class SymbolTable:
    """Explicit symbol table: every catalog name maps to a Symbol with its declared assumptions."""

    def __init__(self, assumptions: dict[str, tuple[str, ...]], latex_names: dict[str, str],
                 unit_scale: Callable[[str], float]):
        self.assumptions = assumptions
        self.latex_names = latex_names
        self._symbols: dict[str, sympy.Symbol] = {}
        self.builder = SympyBuilder(self.symbol, unit_scale)
        self.unit_scale = unit_scale

    def symbol(self, name: str) -> sympy.Symbol:
        sym = self._symbols.get(name)
        if sym is None:
            sym = self._symbols[name] = symbol_for(name, self.assumptions.get(name, ()))
        return sym

    def latex(self, expr: sympy.Basic) -> str:
        names = {s: self.latex_names.get(s.name) or _tt(s.name) for s in expr.free_symbols}
        return sympy.latex(expr, symbol_names=names)

    def key(self, label: str, parts: list[Parsed]) -> str:
        payload = [label]
        for p in parts:
            payload.append([p.text, [(n, self.assumptions.get(n, ()), self.latex_names.get(n)) for n in p.names],
                            [(u, self.unit_scale(u)) for u in p.unit_literals]])
        return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def _tt(name: str) -> str:
    return r"\mathtt{" + name.replace("_", r"\_") + "}"


class SymbolicCache:
    def __init__(self, path: Path | None):
        self.path = path
        self.data: dict[str, list[str]] = {}
        self.dirty = False
        if path is not None and path.exists():
            try:
                raw = json.loads(path.read_text())
                if raw.get("version") == CACHE_VERSION:
                    self.data = raw["entries"]
            except (OSError, ValueError, KeyError):
                self.data = {}

    def get_or_make(self, key: str, make: Callable[[], tuple[str, str]]) -> tuple[str, str]:
        hit = self.data.get(key)
        if hit is None:
            hit = list(make())
            self.data[key] = hit
            self.dirty = True
        return hit[0], hit[1]

    def save(self, used: set[str]) -> None:
        if self.path is None or not (self.dirty or set(self.data) - used):
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        entries = {k: v for k, v in self.data.items() if k in used}
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"version": CACHE_VERSION, "entries": entries}, sort_keys=True))
        tmp.replace(self.path)
