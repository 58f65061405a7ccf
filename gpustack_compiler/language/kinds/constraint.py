"""constraint: an inequality that must hold; it constrains every variable it names and defines none."""

from __future__ import annotations

from .base import CONSTRAINT, RelationKind
from .evaluation import EvaluationContext, sympify, truth


class Constraint(RelationKind):
    name = "constraint"
    role = CONSTRAINT

    def parts(self, spec):
        return {"expression": (spec.expression, True)}

    def record(self, spec, inputs):
        return {"constrains": list(inputs)}

    def check(self, rel: dict, ctx: EvaluationContext) -> tuple[str, str]:
        """(status, inequality) from the values at hand: a check resolves nothing new."""
        expr = ctx.expr(rel, "expression")
        subs = {s: v for s in expr.free_symbols if (v := ctx.known(s.name)) is not None}
        return truth(expr.xreplace(sympify(subs))), rel["parts"]["expression"]
