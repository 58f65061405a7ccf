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
        own = ctx.symbol(rel["defines"])
        f = ctx.expr(rel, "expression").xreplace(subs)
        x = num(ctx.expr(rel, "initial").xreplace(subs))
        if not isinstance(x, float) or f.free_symbols - {own}:
            return Outcome(own, inputs, "iterative relation left symbolic: its inputs are not all known")
        tol, limit = rel.get("tolerance", 1e-9), rel.get("max_iterations", 200)
        fn = sympy.lambdify(own, f, modules="math")
        for i in range(1, limit + 1):
            nxt = float(fn(x))
            if not math.isfinite(nxt):
                raise ResolveError(f"{rel['name']}: the fixed-point iteration diverged at step {i}")
            if abs(nxt - x) <= tol * max(abs(nxt), 1e-300):
                return Outcome(nxt, inputs, f"fixed point after {i} iterations")
            x = nxt
        raise ResolveError(f"{rel['name']}: no fixed point within {limit} iterations (last {x:g})")
