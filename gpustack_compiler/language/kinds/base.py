"""What every relation kind answers, with the answers most kinds share (`defines = expression`).

A kind reads two shapes of a relation: the pydantic spec of the YAML (`models.py`, the syntax) while
the catalog is checked and compiled, and the manifest record (a dict) when the engine evaluates it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import sympy

from ..units import Dim
from .evaluation import EvaluationContext, Outcome, num, resolved_inputs, substitute

# How the resolver chooses among a variable's definitions (`Role`):
EXACT = "exact"  # the variable's sole definition
KEYED = "keyed"  # one of several alternatives, chosen by key (a preset, --variant or a mode)
CONDITIONAL = "conditional"  # usable where its validity holds; chosen when it is the only candidate
CONSTRAINT = "constraint"  # defines nothing; checked against the values resolved

Parts = dict[str, tuple[str, bool]]  # part label -> (expression text, whether it is a condition)


class RelationKind:
    name: ClassVar[str]
    role: ClassVar[str] = EXACT
    # The unknown of a fixed point or an ODE appears in its own definition without being an input of it.
    defines_itself: ClassVar[bool] = False

    # ---- the catalog: syntax, names, dimensions -----------------------------------------------
    def parts(self, spec) -> Parts:
        return {"expression": (spec.expression, False)}

    def extra_names(self, spec) -> set[str]:
        """Names the relation uses outside its expressions."""
        return set()

    def problems(self, spec, known: set[str]) -> list[tuple[str, str]]:
        """(finding id, message) for what the schema cannot say."""
        return []

    def dimensions(self, spec, target: Dim, dim_of: Callable[[str], Dim | None], none: Dim) -> dict[str, Dim] | None:
        """The dimension each value part must have, given the defined variable's; None when it cannot be
        decided because a unit elsewhere is broken (already a finding)."""
        return {label: target for label, (_, condition) in self.parts(spec).items() if not condition}

    # ---- the manifest: canonical form and record ---------------------------------------------
    def canonical(self, spec, part: Callable[[str], sympy.Basic], symbol: Callable[[str], sympy.Symbol]) -> sympy.Basic:
        """The relation as one sympy expression, from its parts' sympy forms."""
        return part("expression")

    def record(self, spec, inputs: tuple[str, ...]) -> dict:
        """Fields of the manifest record beyond those every relation has."""
        return {}

    # ---- the engine ----------------------------------------------------------------------------
    def evaluate(self, rel: dict, ctx: EvaluationContext) -> Outcome:
        inputs, subs = resolved_inputs(rel, ctx)
        return Outcome(num(substitute(ctx.expr(rel, "expression"), subs)), inputs)

    def validity(self, rel: dict, ctx: EvaluationContext) -> tuple[str, str] | None:
        """(status, condition) where the definition holds only under a condition; None when it always holds."""
        return None

    def equation(self, rel: dict, ctx: EvaluationContext) -> sympy.Basic | None:
        """The right-hand side of `defines = rhs` when that is an equation `--solve` may use to pin roots."""
        return None
