"""identity: `defines = expression`, the variable's only definition, and an equation `--solve` may use."""

from __future__ import annotations

from .base import RelationKind


class Identity(RelationKind):
    name = "identity"

    def equation(self, rel, ctx):
        return ctx.expr(rel, "expression")
