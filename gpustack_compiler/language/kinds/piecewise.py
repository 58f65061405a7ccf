"""piecewise: the first piece whose condition holds; the last piece may omit `when` (otherwise)."""

from __future__ import annotations

import sympy

from .base import RelationKind
from .evaluation import Outcome, UndefinedValue, by_name, num, substitute, sympify


class Piecewise(RelationKind):
    name = "piecewise"

    def parts(self, spec):
        parts = {}
        for i, piece in enumerate(spec.pieces):
            parts[f"pieces[{i}].expression"] = (piece.expression, False)
            if piece.when is not None:
                parts[f"pieces[{i}].when"] = (piece.when, True)
        return parts

    def canonical(self, spec, part, symbol):
        pieces = [(part(f"pieces[{i}].expression"), part(f"pieces[{i}].when") if p.when is not None else sympy.true)
                  for i, p in enumerate(spec.pieces)]
        return _otherwise_nan(pieces)

    def record(self, spec, inputs):
        return {"pieces": [{"when": p.when, "expression": p.expression} for p in spec.pieces]}

    def evaluate(self, rel, ctx):
        """Conditions first, then only the branch taken: a branch not taken asks for nothing."""
        inputs: dict[str, object] = {}

        def resolved(expr):
            for sym in by_name(expr.free_symbols):
                if sym.name not in inputs:
                    inputs[sym.name] = ctx.value_of(sym.name)
            return substitute(expr, sympify({s: inputs[s.name] for s in expr.free_symbols}))

        pieces, note = [], None
        for i, piece in enumerate(rel["pieces"]):
            cond = resolved(ctx.expr(rel, f"pieces[{i}].when")) if piece["when"] is not None else sympy.true
            if cond is sympy.false:
                continue
            pieces.append((resolved(ctx.expr(rel, f"pieces[{i}].expression")), cond))
            if cond is sympy.true:
                note = f"piece {i + 1} of {len(rel['pieces'])}"
                break
        if not pieces:
            # No otherwise piece: the relation defines the variable only where one of its conditions holds.
            raise UndefinedValue("it is defined only where " + " or ".join(p["when"] for p in rel["pieces"]))
        return Outcome(num(_otherwise_nan(pieces)), inputs, note)


def _otherwise_nan(pieces: list) -> sympy.Piecewise:
    """Where no condition holds the value is undefined (nan), never the last piece by default."""
    if not pieces or pieces[-1][1] is not sympy.true:
        pieces = [*pieces, (sympy.nan, sympy.true)]
    return sympy.Piecewise(*pieces)
