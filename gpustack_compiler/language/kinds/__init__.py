"""One home per relation kind: each module owns the rules of its kind (its parts, dimension rules, sympy
canonical form, role in selection, manifest record, Neo4j label and evaluation). The YAML syntax of a
kind lives in `models.py`; adding a kind means a model there and a module here, listed below.
"""

from __future__ import annotations

from .approximation import Approximation
from .base import CONDITIONAL, CONSTRAINT, EXACT, KEYED, RelationKind
from .constraint import Constraint
from .differential import Differential
from .identity import Identity
from .iterative import Iterative
from .piecewise import Piecewise
from .stochastic import Stochastic
from .variant import Variant

KINDS: dict[str, RelationKind] = {k.name: k for k in (
    Identity(), Variant(), Approximation(), Piecewise(), Iterative(), Differential(), Stochastic(), Constraint())}

__all__ = ["CONDITIONAL", "CONSTRAINT", "EXACT", "KEYED", "KINDS", "RelationKind", "kind_of"]


def kind_of(relation) -> RelationKind:
    """The kind of a manifest record or a catalog entry (anything with a `kind`)."""
    return KINDS[relation["kind"] if isinstance(relation, dict) else relation.kind]
