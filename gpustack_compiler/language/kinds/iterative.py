"""iterative: a fixed point `defines = expression(defines, ...)`, feedback without a graph cycle."""

from __future__ import annotations

import math

import sympy

from gpustack_compiler.base.errors import ResolveError

from .base import RelationKind
from .evaluation import Outcome, num, resolved_inputs


class Iterative(RelationKind):
    name = "iterative"
    defines_itself = True

    def parts(self, spec):
        return {"expression": (spec.expression, False), "initial": (spec.initial, False)}

    def record(self, spec, inputs):
        return {"tolerance": spec.tolerance, "max_iterations": spec.max_iterations}

    def evaluate(self, rel, ctx):
        inputs, subs = resolved_inputs(rel, ctx)
        name = rel["defines"]
        own = ctx.symbol(name)
        given = tuple(n for n in rel["inputs"] if n != name)
        if all(isinstance(inputs[n], float) for n in given):
            # Numeric inputs: iterate a compiled function instead of substituting into the expression.
            args = tuple(inputs[n] for n in given)
            x = float(ctx.numeric(rel, "initial", given)(*args))
            step = ctx.numeric(rel, "expression", (name, *given))
            return self._iterate(rel, lambda v: float(step(v, *args)), x, inputs)
        f = ctx.expr(rel, "expression").xreplace(subs)
        start = ctx.expr(rel, "initial").xreplace(subs)
        x = num(start)
        if not isinstance(x, float) or f.free_symbols - {own}:
            ctx.unevaluated(name, f + start)
            return Outcome(own, inputs, "iterative relation left symbolic: its inputs are not all known")
        fn = sympy.lambdify(own, f, modules="math")
        return self._iterate(rel, lambda v: float(fn(v)), x, inputs)

    @staticmethod
    def _iterate(rel, fn, x: float, inputs) -> Outcome:
        tol, limit = rel.get("tolerance", 1e-9), rel.get("max_iterations", 200)
        for i in range(1, limit + 1):
            nxt = fn(x)
            if not math.isfinite(nxt):
                raise ResolveError(f"{rel['name']}: the fixed-point iteration diverged at step {i}")
            if abs(nxt - x) <= tol * max(abs(nxt), 1e-300):
                return Outcome(nxt, inputs, f"fixed point after {i} iterations")
            x = nxt
        raise ResolveError(f"{rel['name']}: no fixed point within {limit} iterations (last {x:g})")
