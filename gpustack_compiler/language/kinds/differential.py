"""differential: `d(defines)/d(with_respect_to) = expression`, integrated from `start` to the value of
`with_respect_to`, starting at `initial`."""

from __future__ import annotations

import functools

import sympy

from .base import RelationKind
from .evaluation import Outcome, by_name, num, resolved_inputs

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

    def __init__(self):
        # The right-hand side compiled once per expression, its other inputs as arguments: lambdify costs
        # more than the integration, and an experiment evaluates one relation at many inputs.
        self._compiled: dict = {}

    def _function(self, rhs, t_sym, y_sym, fixed: tuple):
        """The right-hand side with `fixed` (symbol, value) pairs substituted, compiled once: its other
        inputs are the function's first arguments, in name order, then t and y."""
        key = (rhs, t_sym, y_sym, fixed)
        if key not in self._compiled:
            expr = rhs.xreplace(dict(fixed)) if fixed else rhs
            others = by_name(expr.free_symbols - {t_sym, y_sym})
            self._compiled[key] = (others, sympy.lambdify((*others, t_sym, y_sym), expr, modules="math"))
        return self._compiled[key]

    def evaluate(self, rel, ctx):
        """Classical RK4 from `start` to the value of `with_respect_to`."""
        inputs, subs = resolved_inputs(rel, ctx)
        y_sym, t_sym = ctx.symbol(rel["defines"]), ctx.symbol(rel["with_respect_to"])
        rhs = ctx.expr(rel, "expression")
        y0, start = ctx.expr(rel, "initial").xreplace(subs), ctx.expr(rel, "start").xreplace(subs)
        y, t0 = num(y0), num(start)
        t1 = inputs.get(rel["with_respect_to"])
        named = {ctx.symbol(n): v for n, v in inputs.items() if n != rel["with_respect_to"]}
        # Missing inputs stay symbols and zeros are substituted (a rate of zero cancels an unknown damage);
        # every other input is an argument, so one compiled function serves every value of it.
        fixed = tuple(sorted(((k, subs[k]) for k, v in named.items() if not isinstance(v, float) or v == 0.0),
                             key=lambda kv: kv[0].name))
        others, compiled = self._function(rhs, t_sym, y_sym, fixed)
        args = [named.get(s) for s in others]
        if not all(isinstance(v, float) for v in (y, t0, t1, *args)):
            waiting = rhs.xreplace({k: v for k, v in subs.items() if k != t_sym})
            ctx.unevaluated(rel["defines"], waiting + y0 + start + sympy.sympify(t1 or 0))
            return Outcome(y_sym, inputs, "differential relation left symbolic: its inputs are not all known")
        f = functools.partial(compiled, *args)

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
