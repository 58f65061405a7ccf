"""approximation: a definition valid only where its `validity` condition holds; the condition is checked
wherever the definition is used."""

from __future__ import annotations

from .base import CONDITIONAL, RelationKind
from .evaluation import by_name, sympify, truth


class Approximation(RelationKind):
    name = "approximation"
    role = CONDITIONAL

    def parts(self, spec):
        return {"expression": (spec.expression, False), "validity": (spec.validity, True)}

    def record(self, spec, inputs):
        return {"validity": spec.validity}

    def validity(self, rel, ctx):
        cond = ctx.expr(rel, "validity")
        subs = {s: ctx.value_of(s.name) for s in by_name(cond.free_symbols)}
        return truth(cond.xreplace(sympify(subs))), rel["parts"]["validity"]
