"""The unit system declared in `catalog/units.yaml`: dimensions as exponent vectors, units as
(scale to the coherent base unit, dimension). Values are always converted to base units before
evaluation, so a relation's numbers never depend on which display unit a variable declares."""

from __future__ import annotations

import ast
import math
from dataclasses import dataclass
from fractions import Fraction

from gpustack_compiler.base.suggest import did_you_mean

MAX_UNIT_TEXT = 200
# Physical units carry small powers (m**3, s**-2); a larger one is a typo or an attack (m**1e400).
MAX_EXPONENT = 12


class UnitError(ValueError):
    """A unit string that cannot be read; `hint` says what to write instead."""

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message + (f" (hint: {hint})" if hint else ""))
        self.hint = hint


_MEMO: dict[tuple, Dim] = {}
_INTERNED: dict[tuple, Dim] = {}


class Dim:
    """Exponents over the declared base dimensions, in declaration order.

    Interned (`Dim.of`: one object per exponent tuple, unpickling included) and arithmetic memoized:
    a catalog uses few distinct dimensions, and with one object each, equality is identity. Fraction
    arithmetic, hashing and comparison over eleven exponents would otherwise dominate checking."""

    __slots__ = ("exps", "_hash")

    def __init__(self, exps: tuple[Fraction, ...]):
        self.exps = exps
        self._hash = hash(exps)

    @staticmethod
    def of(exps: tuple[Fraction, ...]) -> Dim:
        dim = _INTERNED.get(exps)
        if dim is None:
            dim = _INTERNED[exps] = Dim(exps)
        return dim

    def __reduce__(self):
        return Dim.of, (self.exps,)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other) -> bool:
        return self is other

    def __repr__(self) -> str:
        return f"Dim({self.exps})"

    def _memo(self, op: str, other, make) -> Dim:
        key = (op, self, other)
        hit = _MEMO.get(key)
        if hit is None:
            hit = _MEMO[key] = Dim.of(make())
        return hit

    def __mul__(self, other: Dim) -> Dim:
        return self._memo("*", other, lambda: tuple(a + b for a, b in zip(self.exps, other.exps)))

    def __truediv__(self, other: Dim) -> Dim:
        return self._memo("/", other, lambda: tuple(a - b for a, b in zip(self.exps, other.exps)))

    def __pow__(self, p: Fraction) -> Dim:
        return self._memo("**", p, lambda: tuple(a * p for a in self.exps))

    @property
    def dimensionless(self) -> bool:
        return not any(self.exps)


@dataclass(frozen=True)
class Unit:
    scale: float
    dim: Dim


class UnitSystem:
    def __init__(self, base: list[tuple[str, str]]):
        """`base`: (dimension name, base unit symbol) pairs in order."""
        self.dimension_names = [name for name, _ in base]
        self.base_symbols = [symbol for _, symbol in base]
        self.units: dict[str, Unit] = {}
        self.ambiguous: dict[str, str] = {}
        n = len(base)
        for i, (_, symbol) in enumerate(base):
            self.units[symbol] = Unit(1.0, Dim.of(tuple(Fraction(int(i == j)) for j in range(n))))
        self.none = Dim.of(tuple(Fraction(0) for _ in range(n)))
        self._cache: dict[str, Unit] = {}

    @classmethod
    def from_manifest(cls, table: dict) -> UnitSystem:
        """Rebuild from a manifest's `units` section (scales and dimensions already resolved)."""
        system = cls([(d["name"], d["unit"]) for d in table["base_dimensions"]])
        names = system.dimension_names
        for symbol, u in table["units"].items():
            exps = tuple(Fraction(u["dimension"].get(n, "0")) for n in names)
            system.units[symbol] = Unit(u["scale"], Dim.of(exps))
        system.ambiguous.update(table.get("ambiguous", {}))
        return system

    def define(self, symbol: str, definition: str) -> None:
        if not symbol.isidentifier():
            raise UnitError(f"unit symbol {symbol!r} is not an identifier")
        if symbol in self.units:
            raise UnitError(f"unit {symbol!r} is defined twice")
        self.units[symbol] = self._parse(definition, allow_numbers=True)

    def parse(self, text: str) -> Unit:
        """A unit string from a variable, constant or assignment (no bare scale numbers but `1`)."""
        hit = self._cache.get(text)
        if hit is None:
            hit = self._parse(text, allow_numbers=False)
            self._cache[text] = hit
        return hit

    def format_dim(self, dim: Dim) -> str:
        if dim is None:
            return "?"
        num, den = [], []
        for name, e in zip(self.base_symbols, dim.exps):
            if e > 0:
                num.append(name if e == 1 else f"{name}**{e}")
            elif e < 0:
                den.append(name if e == -1 else f"{name}**{-e}")
        text = "*".join(num) or "1"
        if den:
            text += "/" + (den[0] if len(den) == 1 else "(" + "*".join(den) + ")")
        return text

    def dim_as_dict(self, dim: Dim) -> dict[str, str]:
        return {name: str(e) for name, e in zip(self.dimension_names, dim.exps) if e}

    def _parse(self, text: str, allow_numbers: bool) -> Unit:
        if not isinstance(text, str) or not text.strip():
            raise UnitError("empty unit string", "write `1` for a dimensionless quantity")
        if len(text) > MAX_UNIT_TEXT:
            raise UnitError("unit string too long")
        try:
            tree = ast.parse(text.strip(), mode="eval")
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            raise UnitError(f"cannot read unit {text!r}", "use `*`, `/`, `**` and `1`, e.g. `USD/kWh`") from None
        try:
            unit = self._walk(tree.body, allow_numbers)
        except RecursionError:
            raise UnitError(f"unit {text!r} is nested too deeply") from None
        except (OverflowError, ZeroDivisionError):
            raise UnitError(f"unit {text!r} has a scale that is not a finite number") from None
        if not math.isfinite(unit.scale) or unit.scale == 0:
            raise UnitError(f"unit {text!r} has a scale that is not a finite, nonzero number")
        return unit

    def _walk(self, node: ast.AST, allow_numbers: bool) -> Unit:
        if isinstance(node, ast.Name):
            if node.id in self.ambiguous:
                raise UnitError(f"ambiguous unit symbol {node.id!r}", self.ambiguous[node.id])
            unit = self.units.get(node.id)
            if unit is None:
                raise UnitError(f"unknown unit {node.id!r}", did_you_mean(node.id, self.units))
            return unit
        if isinstance(node, ast.Constant) and type(node.value) in (int, float):
            if node.value != 1 and not allow_numbers:
                raise UnitError(f"bare number {node.value!r} in a unit string",
                                "declare a scaled unit in catalog/units.yaml (e.g. `GB`)")
            return Unit(float(node.value), self.none)
        if isinstance(node, ast.BinOp):
            if isinstance(node.op, ast.Pow):
                exponent = _fraction(node.right)
                if exponent is None or abs(exponent) > MAX_EXPONENT:
                    raise UnitError(f"unit exponents must be numbers of at most {MAX_EXPONENT}, e.g. `m**2`")
                base = self._walk(node.left, allow_numbers)
                return Unit(base.scale ** float(exponent), base.dim ** exponent)
            left, right = self._walk(node.left, allow_numbers), self._walk(node.right, allow_numbers)
            if isinstance(node.op, ast.Mult):
                return Unit(left.scale * right.scale, left.dim * right.dim)
            if isinstance(node.op, ast.Div):
                return Unit(left.scale / right.scale, left.dim / right.dim)
        raise UnitError(f"unsupported syntax in unit: {ast.unparse(node)!r}",
                        "use `*`, `/`, `**` and `1`")


def exact(value) -> Fraction | None:
    """A literal int or float as an exact fraction; None for one that is not finite (`1e400` parses as
    inf, which Fraction refuses)."""
    if type(value) not in (int, float) or (type(value) is float and not math.isfinite(value)):
        return None
    return Fraction(repr(value)) if type(value) is float else Fraction(value)


def _fraction(node: ast.AST) -> Fraction | None:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return exact(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        inner = _fraction(node.operand)
        return None if inner is None else (-inner if isinstance(node.op, ast.USub) else inner)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
        a, b = _fraction(node.left), _fraction(node.right)
        if a is not None and b:
            return a / b
    return None
