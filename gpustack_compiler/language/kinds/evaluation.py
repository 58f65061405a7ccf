"""What a relation kind needs from the engine to evaluate a relation, and the sympy arithmetic they share.

The compiler never imports the engine: the engine's resolver implements `EvaluationContext`, and each
kind evaluates a manifest record through it. Values are floats in coherent base units, or sympy
expressions in the roots that are still missing (or sampled).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import sympy

from gpustack_compiler.base.errors import ResolveError

if TYPE_CHECKING:
    from .distributions import RandomValue

Value = float | sympy.Basic


class UndefinedValue(ResolveError):
    """A relation's arithmetic left the real numbers at these inputs (0/0, inf - inf, a complex root); the
    resolver names the relation."""


class EvaluationContext(Protocol):
    def value_of(self, name: str) -> Value:
        """The value of a name, resolving it (and its trace) on first use."""

    def known(self, name: str) -> Value | None:
        """A value already at hand (evaluated, assigned or a constant), resolving nothing new."""

    def expr(self, rel: dict, label: str) -> sympy.Basic:
        """The sympy form of one part of a relation (see `RelationKind.parts`)."""

    def symbol(self, name: str) -> sympy.Symbol:
        ...

    def numeric(self, rel: dict, label: str, names: tuple[str, ...]):
        """One part of a relation as a plain Python function of `names` (floats in base units), made once
        per relation and kept."""

    def random(self, name: str, value: RandomValue) -> sympy.Symbol | None:
        """Declares that `name` is drawn from a distribution. Under Monte Carlo the answer is the symbol
        that stands for its draws; otherwise None, and the deterministic value is the caller's to give."""

    def unevaluated(self, name: str, pending: sympy.Basic) -> None:
        """Declares that `name` stands as its own symbol because its relation could not be evaluated;
        `pending` is what it waits on (its free symbols name the missing inputs behind it)."""


@dataclass
class Outcome:
    value: Value
    inputs: dict[str, Value]  # what the trace shows as the step's inputs
    note: str | None = None


def resolved_inputs(rel: dict, ctx: EvaluationContext) -> tuple[dict[str, Value], dict]:
    """The relation's inputs by name, and the same as a substitution of sympy symbols."""
    inputs = {n: ctx.value_of(n) for n in rel["inputs"]}
    return inputs, sympify({ctx.symbol(n): v for n, v in inputs.items()})


def by_name(symbols) -> list:
    """Symbols in name order: a set's order follows the per-process string hash, and the order in which
    inputs are resolved is the order of the trace (and of the first error met)."""
    return sorted(symbols, key=lambda s: s.name)


def sympify(subs: dict) -> dict:
    return {k: (sympy.Float(v, 17) if isinstance(v, float) else v) for k, v in subs.items()}


def substitute(expr, subs: dict):
    """`xreplace`, except that a Min or Max whose arguments stay symbolic is built unevaluated: sympy's
    pairwise search for dominated arguments costs more than it saves when the result is lambdified."""
    if expr in subs:
        return subs[expr]
    if not expr.args:
        return expr
    args = [substitute(a, subs) for a in expr.args]
    if all(new is old for new, old in zip(args, expr.args)):
        return expr
    if expr.func in (sympy.Min, sympy.Max) and not all(a.is_number for a in args):
        return expr.func(*args, evaluate=False)
    try:
        return expr.func(*args)
    except ValueError:
        # sympy refuses to order NaN (Max, Min, comparisons)
        raise UndefinedValue(f"an undefined number (0/0 or inf - inf) reached {expr.func.__name__}") from None


def num(expr) -> Value:
    """A float when the expression is a real number, else the (symbolic) expression. A value that is not
    finite (a division by zero, an overflow) is undefined: the figure it feeds is not resolved, with the
    reason, rather than carried on as inf or NaN."""
    if isinstance(expr, float):
        v = complex(expr)
    elif expr.is_number:
        v = complex(expr.evalf(17))
    else:
        return expr
    if not (math.isfinite(v.real) and math.isfinite(v.imag)):
        raise UndefinedValue("it is not finite (a division by zero or an overflow)")
    if abs(v.imag) > 1e-12 * max(1.0, abs(v.real)):
        raise UndefinedValue(f"it evaluated to a complex number ({v})")
    return float(v.real)


def truth(expr) -> str:
    if expr is sympy.true or expr is True:
        return "satisfied"
    if expr is sympy.false or expr is False:
        return "violated"
    return "undetermined"
