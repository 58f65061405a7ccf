"""variant: one of several alternative definitions of a variable, chosen by key; otherwise an identity."""

from __future__ import annotations

from .base import KEYED
from .identity import Identity


class Variant(Identity):
    name = "variant"
    role = KEYED

    def record(self, spec, inputs):
        out = {"variant": spec.variant}
        if spec.leaves_out is not None:
            out["leaves_out"] = spec.leaves_out
        return out
