"""Expressions from untrusted YAML, parsed without eval.

Python's `ast` reads the text; only an allowlist of node types and functions passes; the tree is
mapped to sympy through an explicit symbol table (so `E`, `N`, `S`, `beta` stay ordinary names).
Dimensions are inferred on the same tree. Nothing in here executes catalog text.
"""

from __future__ import annotations

import ast
import keyword
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

import sympy

from .units import Dim, UnitError, UnitSystem, exact

MAX_TEXT = 2000
MAX_NODES = 600
MAX_CONSTANT_EXPONENT = 64

# name -> (sympy constructor, allowed argument counts, dimension rule)
#   "dimensionless": every argument dimensionless, result dimensionless
#   "same": every argument the same dimension, result that dimension
#   "sqrt"/"cbrt": result is the argument's dimension to the 1/2 or 1/3
FUNCTIONS: dict[str, tuple[Callable, tuple[int, ...], str]] = {
    "exp": (sympy.exp, (1,), "dimensionless"),
    "log": (sympy.log, (1,), "dimensionless"),
    "log10": (lambda x: sympy.log(x, 10), (1,), "dimensionless"),
    "log2": (lambda x: sympy.log(x, 2), (1,), "dimensionless"),
    "sqrt": (sympy.sqrt, (1,), "sqrt"),
    "cbrt": (sympy.cbrt, (1,), "cbrt"),
    "Abs": (sympy.Abs, (1,), "same"),
    "Min": (sympy.Min, (2, 3, 4, 5, 6, 7, 8), "same"),
    "Max": (sympy.Max, (2, 3, 4, 5, 6, 7, 8), "same"),
    "floor": (sympy.floor, (1,), "dimensionless"),
    "ceiling": (sympy.ceiling, (1,), "dimensionless"),
    "sin": (sympy.sin, (1,), "dimensionless"),
    "cos": (sympy.cos, (1,), "dimensionless"),
    "tan": (sympy.tan, (1,), "dimensionless"),
    "asin": (sympy.asin, (1,), "dimensionless"),
    "acos": (sympy.acos, (1,), "dimensionless"),
    "atan": (sympy.atan, (1,), "dimensionless"),
    "sinh": (sympy.sinh, (1,), "dimensionless"),
    "cosh": (sympy.cosh, (1,), "dimensionless"),
    "tanh": (sympy.tanh, (1,), "dimensionless"),
    "erf": (sympy.erf, (1,), "dimensionless"),
    "erfc": (sympy.erfc, (1,), "dimensionless"),
}
NAMED_NUMBERS = {"pi": sympy.pi}
UNIT_LITERAL = "unit"
_COMPARE = {ast.Lt: sympy.Lt, ast.LtE: sympy.Le, ast.Gt: sympy.Gt, ast.GtE: sympy.Ge}
_BINOPS = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.Pow)


class ExprError(Exception):
    """A finding about an expression: `id` is the finding id."""

    def __init__(self, id: str, message: str, column: int | None = None):
        super().__init__(message)
        self.id = id
        self.message = message
        self.column = column


@dataclass(frozen=True)
class Parsed:
    text: str
    tree: ast.expr
    names: tuple[str, ...]
    unit_literals: tuple[str, ...]
    is_condition: bool


def dotted(node: ast.AST) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def parse(text: str) -> Parsed:
    """Parse and validate; raises ExprError. Never evaluates anything."""
    if not isinstance(text, str):
        raise ExprError("expr.syntax", "expression must be a string")
    if len(text) > MAX_TEXT:
        raise ExprError("expr.too-large", f"expression longer than {MAX_TEXT} characters")
    if "\x00" in text:
        raise ExprError("expr.syntax", "expression contains a NUL character")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        raise ExprError("expr.syntax", f"cannot parse expression: {exc.msg}", exc.offset) from None
    except (ValueError, RecursionError, MemoryError, OverflowError):
        raise ExprError("expr.syntax", "cannot parse expression") from None
    names: set[str] = set()
    units: set[str] = set()
    count = 0
    stack = [tree.body]
    while stack:
        node = stack.pop()
        count += 1
        if count > MAX_NODES:
            raise ExprError("expr.too-large", f"expression has more than {MAX_NODES} nodes")
        stack.extend(_check_node(node, names, units))
    body = tree.body
    is_condition = isinstance(body, (ast.Compare, ast.BoolOp)) or (
        isinstance(body, ast.UnaryOp) and isinstance(body.op, ast.Not))
    return Parsed(text, body, tuple(sorted(names)), tuple(sorted(units)), is_condition)


def _check_node(node: ast.AST, names: set[str], units: set[str]) -> list[ast.AST]:
    """Validate one node; return the children still to visit."""
    col = getattr(node, "col_offset", None)
    col = col + 1 if col is not None else None
    if isinstance(node, (ast.Attribute, ast.Name)):
        name = dotted(node)
        if name is None:
            raise ExprError("expr.forbidden", "attribute access is only allowed in dotted names", col)
        if name in FUNCTIONS or name == UNIT_LITERAL:
            raise ExprError("expr.forbidden", f"function {name!r} used without a call", col)
        if name not in NAMED_NUMBERS:
            names.add(name)
        return []
    if isinstance(node, ast.Constant):
        if type(node.value) not in (int, float):
            raise ExprError("expr.forbidden", f"literal {node.value!r} is not a real number", col)
        return []
    if isinstance(node, ast.BinOp):
        if not isinstance(node.op, _BINOPS):
            raise ExprError("expr.forbidden", f"operator {type(node.op).__name__} is not allowed", col)
        if isinstance(node.op, ast.Pow) and _is_numeric(node.right):
            exponent = constant_fraction(node.right)
            if exponent is None or abs(exponent) > MAX_CONSTANT_EXPONENT:
                # sympy would evaluate a numeric power eagerly: 9**9**9 never finishes.
                raise ExprError("expr.too-large", f"constant exponent `{ast.unparse(node.right)[:40]}` is "
                                f"not a number of magnitude at most {MAX_CONSTANT_EXPONENT}", col)
        return [node.left, node.right]
    if isinstance(node, ast.UnaryOp):
        if not isinstance(node.op, (ast.USub, ast.UAdd, ast.Not)):
            raise ExprError("expr.forbidden", f"operator {type(node.op).__name__} is not allowed", col)
        return [node.operand]
    if isinstance(node, ast.Compare):
        for op in node.ops:
            if type(op) not in _COMPARE:
                raise ExprError("expr.forbidden", "only <, <=, >, >= comparisons are allowed", col)
        return [node.left, *node.comparators]
    if isinstance(node, ast.BoolOp):
        return list(node.values)
    if isinstance(node, ast.Call):
        func = node.func.id if isinstance(node.func, ast.Name) else None
        if node.keywords or any(isinstance(a, ast.Starred) for a in node.args):
            raise ExprError("expr.forbidden", "calls take positional arguments only", col)
        if func == UNIT_LITERAL:
            if len(node.args) != 1 or not (isinstance(node.args[0], ast.Constant)
                                           and isinstance(node.args[0].value, str)):
                raise ExprError("expr.forbidden", "unit() takes one unit string, e.g. unit('FLOP/token')", col)
            units.add(node.args[0].value)
            return []
        if func not in FUNCTIONS:
            shown = func or ast.unparse(node.func)[:40]
            raise ExprError("expr.forbidden", f"function {shown!r} is not in the allowlist "
                            f"({', '.join(sorted(FUNCTIONS))}, unit)", col)
        arities = FUNCTIONS[func][1]
        if len(node.args) not in arities:
            raise ExprError("expr.forbidden", f"{func}() takes {arities[0]}"
                            f"{'+' if len(arities) > 1 else ''} argument(s)", col)
        return list(node.args)
    raise ExprError("expr.forbidden", f"{type(node).__name__} is not allowed in an expression", col)


def _is_numeric(node: ast.AST) -> bool:
    return all(isinstance(n, (ast.Constant, ast.BinOp, ast.UnaryOp, ast.operator, ast.unaryop))
               for n in ast.walk(node))


def constant_fraction(node: ast.AST) -> Fraction | None:
    """The exact value of a purely numeric subtree (for exponents), or None."""
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return exact(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        v = constant_fraction(node.operand)
        return None if v is None else (-v if isinstance(node.op, ast.USub) else v)
    if isinstance(node, ast.BinOp):
        a, b = constant_fraction(node.left), constant_fraction(node.right)
        if a is None or b is None:
            return None
        if isinstance(node.op, ast.Add):
            return a + b
        if isinstance(node.op, ast.Sub):
            return a - b
        if isinstance(node.op, ast.Mult):
            return a * b
        if isinstance(node.op, ast.Div):
            return a / b if b else None
        if isinstance(node.op, ast.Pow) and b.denominator == 1 and abs(b) <= MAX_CONSTANT_EXPONENT:
            if a == 0 and b < 0:
                return None
            return a ** int(b)
    return None


# ---------------------------------------------------------------------------------------------
# Dimensions

class _Any:
    """The literal 0: compatible with every dimension in sums and comparisons."""


ANY = _Any()
BOOL = "condition"


@dataclass
class DimProblem:
    id: str
    message: str


class DimensionInference:
    """Infers the dimension of a parsed tree. Unknown names make it undecided (None)."""

    def __init__(self, units: UnitSystem, dim_of: Callable[[str], Dim | None]):
        self.units = units
        self.dim_of = dim_of

    def infer(self, parsed: Parsed) -> tuple[Dim | _Any | str | None, list[DimProblem]]:
        problems: list[DimProblem] = []
        try:
            result = self._walk(parsed.tree, problems)
        except RecursionError:
            problems.append(DimProblem("dim.undecided", "expression nested too deeply to check"))
            return None, problems
        return result, problems

    def fmt(self, d) -> str:
        if d is ANY:
            return "any"
        if d is None:
            return "?"
        if d == BOOL:
            return "a condition"
        return self.units.format_dim(d)

    def _walk(self, node: ast.AST, problems: list[DimProblem]):
        if isinstance(node, (ast.Name, ast.Attribute)):
            name = dotted(node)
            if name in NAMED_NUMBERS:
                return self.units.none
            return self.dim_of(name)
        if isinstance(node, ast.Constant):
            return ANY if node.value == 0 else self.units.none
        if isinstance(node, ast.UnaryOp):
            inner = self._walk(node.operand, problems)
            if isinstance(node.op, ast.Not):
                if inner != BOOL and inner is not None:
                    problems.append(DimProblem("dim.condition", "`not` applies to a condition"))
                return BOOL
            return inner
        if isinstance(node, ast.BinOp):
            return self._binop(node, problems)
        if isinstance(node, ast.Compare):
            operands = [self._walk(n, problems) for n in [node.left, *node.comparators]]
            self._same(operands, "sides of a comparison", problems, node)
            return BOOL
        if isinstance(node, ast.BoolOp):
            for value in node.values:
                d = self._walk(value, problems)
                if d != BOOL and d is not None:
                    problems.append(DimProblem("dim.condition", f"`{ast.unparse(value)}` is not a condition"))
            return BOOL
        if isinstance(node, ast.Call):
            return self._call(node, problems)
        return None

    def _same(self, dims: list, what: str, problems: list[DimProblem], node: ast.AST):
        known = [d for d in dims if d is not ANY]
        if any(d is None for d in known):
            return None
        if any(d == BOOL for d in known):
            problems.append(DimProblem("dim.condition", f"a condition is used as a value in {what}"))
            return None
        if not known:
            return ANY
        first = known[0]
        if any(d != first for d in known[1:]):
            shown = ", ".join(sorted({self.fmt(d) for d in known}))
            problems.append(DimProblem("dim.mismatch", f"{what} disagree in dimension ({shown}) in "
                                       f"`{ast.unparse(node)[:120]}`"))
            return None
        return first

    def _binop(self, node: ast.BinOp, problems: list[DimProblem]):
        left = self._walk(node.left, problems)
        right = self._walk(node.right, problems)
        if left == BOOL or right == BOOL:
            problems.append(DimProblem("dim.condition", "a condition is used as a value"))
            return None
        if isinstance(node.op, (ast.Add, ast.Sub)):
            return self._same([left, right], "terms of a sum", problems, node)
        if isinstance(node.op, ast.Pow):
            if right is None:
                return None
            if right is not ANY and not right.dimensionless:
                problems.append(DimProblem("dim.exponent", f"exponent `{ast.unparse(node.right)}` has "
                                           f"dimension {self.fmt(right)}"))
                return None
            if left is None:
                return None
            if left is ANY or left.dimensionless:
                return self.units.none if left is not ANY else ANY
            exponent = constant_fraction(node.right)
            if exponent is None:
                problems.append(DimProblem("dim.undecided", f"`{ast.unparse(node)[:120]}` raises a quantity "
                                           f"with dimension {self.fmt(left)} to a non-constant power; "
                                           "normalize the base to a dimensionless ratio"))
                return None
            return left ** exponent
        if left is None or right is None:
            return None
        if left is ANY or right is ANY:
            return ANY
        if isinstance(node.op, ast.Mult):
            return left * right
        return left / right

    def _call(self, node: ast.Call, problems: list[DimProblem]):
        func = node.func.id
        if func == UNIT_LITERAL:
            try:
                return self.units.parse(node.args[0].value).dim
            except UnitError as exc:
                problems.append(DimProblem("unit.invalid", f"in unit(): {exc}"))
                return None
        rule = FUNCTIONS[func][2]
        args = [self._walk(a, problems) for a in node.args]
        if rule == "same":
            return self._same(args, f"arguments of {func}()", problems, node)
        if any(a is None for a in args):
            return None
        if any(a == BOOL for a in args):
            problems.append(DimProblem("dim.condition", f"a condition is passed to {func}()"))
            return None
        if rule in ("sqrt", "cbrt"):
            arg = args[0]
            if arg is ANY:
                return ANY
            return arg ** Fraction(1, 2 if rule == "sqrt" else 3)
        for a, arg_node in zip(args, node.args):
            if a is not ANY and not a.dimensionless:
                problems.append(DimProblem("dim.function-arg", f"argument of {func}() must be dimensionless, "
                                           f"`{ast.unparse(arg_node)[:80]}` has {self.fmt(a)}"))
                return None
        return self.units.none


def is_keyword_free(name: str) -> bool:
    return not any(keyword.iskeyword(part) for part in name.split("."))


# ---------------------------------------------------------------------------------------------
# sympy

class SympyBuilder:
    """Maps a validated tree to sympy through an explicit symbol table."""

    def __init__(self, symbol: Callable[[str], sympy.Symbol], unit_scale: Callable[[str], float]):
        self.symbol = symbol
        self.unit_scale = unit_scale

    def build(self, parsed: Parsed) -> sympy.Basic:
        try:
            return self._walk(parsed.tree)
        except RecursionError:
            raise ExprError("expr.too-large", "expression nested too deeply") from None
        except (TypeError, ValueError, ZeroDivisionError, OverflowError) as exc:
            raise ExprError("expr.invalid", f"sympy rejected the expression: {str(exc)[:120]}") from None

    def _walk(self, node: ast.AST):
        if isinstance(node, (ast.Name, ast.Attribute)):
            name = dotted(node)
            return NAMED_NUMBERS[name] if name in NAMED_NUMBERS else self.symbol(name)
        if isinstance(node, ast.Constant):
            v = node.value
            return sympy.Integer(v) if isinstance(v, int) else sympy.Float(repr(v), 17)
        if isinstance(node, ast.UnaryOp):
            inner = self._walk(node.operand)
            if isinstance(node.op, ast.Not):
                return sympy.Not(inner)
            return -inner if isinstance(node.op, ast.USub) else inner
        if isinstance(node, ast.BinOp):
            a, b = self._walk(node.left), self._walk(node.right)
            if isinstance(node.op, ast.Add):
                return a + b
            if isinstance(node.op, ast.Sub):
                return a - b
            if isinstance(node.op, ast.Mult):
                return a * b
            if isinstance(node.op, ast.Div):
                return a / b
            return a ** b
        if isinstance(node, ast.Compare):
            parts = [self._walk(n) for n in [node.left, *node.comparators]]
            rels = [_COMPARE[type(op)](parts[i], parts[i + 1], evaluate=False) for i, op in enumerate(node.ops)]
            return rels[0] if len(rels) == 1 else sympy.And(*rels)
        if isinstance(node, ast.BoolOp):
            values = [self._walk(v) for v in node.values]
            return sympy.And(*values) if isinstance(node.op, ast.And) else sympy.Or(*values)
        if isinstance(node, ast.Call):
            func = node.func.id
            if func == UNIT_LITERAL:
                scale = self.unit_scale(node.args[0].value)
                return sympy.Integer(1) if scale == 1 else sympy.Float(repr(scale), 17)
            return FUNCTIONS[func][0](*[self._walk(a) for a in node.args])
        raise ExprError("expr.forbidden", f"{type(node).__name__} is not allowed")
