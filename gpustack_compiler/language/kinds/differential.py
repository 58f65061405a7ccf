"""differential: `d(defines)/d(with_respect_to) = expression`, integrated from `start` to the value of
`with_respect_to`, starting at `initial`."""

from __future__ import annotations

import sympy

from .base import RelationKind
from .evaluation import Outcome, num, resolved_inputs

RK4_STEPS = 1000


class Differential(RelationKind):
    name = "differential"
    defines_itself = True

    def parts(self, spec):
        return {"expression": (spec.expression, False), "initial": (spec.initial, False),
                "start": (spec.start, False)}

    def extra_names(self, spec):
        return {spec.with_respect_to}

    def problems(self, spec, known):
        if spec.with_respect_to in known:
            return []
        return [("expr.unknown-name", f"{spec.name}.with_respect_to: `{spec.with_respect_to}` is not declared")]

    def dimensions(self, spec, target, dim_of, none):
        wrt = dim_of(spec.with_respect_to)
        if wrt is None:
            return None
        return {"expression": target / wrt, "initial": target, "start": wrt}

    def canonical(self, spec, part, symbol):
        return sympy.Eq(sympy.Derivative(symbol(spec.defines), symbol(spec.with_respect_to)), part("expression"),
                        evaluate=False)

    def record(self, spec, inputs):
        return {"with_respect_to": spec.with_respect_to}

    def evaluate(self, rel, ctx):
        """Classical RK4 from `start` to the value of `with_respect_to`."""
        inputs, subs = resolved_inputs(rel, ctx)
        y_sym, t_sym = ctx.symbol(rel["defines"]), ctx.symbol(rel["with_respect_to"])
        rhs = ctx.expr(rel, "expression").xreplace({k: v for k, v in subs.items() if k != t_sym})
        y = num(ctx.expr(rel, "initial").xreplace(subs))
        t0 = num(ctx.expr(rel, "start").xreplace(subs))
        t1 = inputs.get(rel["with_respect_to"])
        if not all(isinstance(v, float) for v in (y, t0, t1)) or rhs.free_symbols - {y_sym, t_sym}:
            return Outcome(y_sym, inputs, "differential relation left symbolic: its inputs are not all known")
        f = sympy.lambdify((t_sym, y_sym), rhs, modules="math")
        h = (t1 - t0) / RK4_STEPS
        t = t0
        for _ in range(RK4_STEPS):
            k1 = f(t, y)
            k2 = f(t + h / 2, y + h * k1 / 2)
            k3 = f(t + h / 2, y + h * k2 / 2)
            k4 = f(t + h, y + h * k3)
            y += h * (k1 + 2 * k2 + 2 * k3 + k4) / 6
            t += h
        return Outcome(float(y), inputs, f"RK4, {RK4_STEPS} steps")
