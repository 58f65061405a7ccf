"""A value against what the catalog declares about its variable: the assumptions (positive, integer, ...)
and the bounds. The resolver reports every check; a scenario refuses an assigned value that violates one
(a negative token budget, a fill fraction of 7), unless violations are allowed."""

from __future__ import annotations

import math

from gpustack_compiler.manifest.records import VariableRecord

ASSUMPTIONS = {
    "positive": lambda v, shown: v > 0,
    "nonnegative": lambda v, shown: v >= 0,
    "negative": lambda v, shown: v < 0,
    "nonpositive": lambda v, shown: v <= 0,
    "nonzero": lambda v, shown: v != 0,
    "real": lambda v, shown: math.isfinite(v),
    "integer": lambda v, shown: math.isfinite(shown) and abs(shown - round(shown)) <= 1e-9 * max(1.0, abs(shown)),
}


def domain_checks(meta: VariableRecord, value: float) -> list[tuple[str, str, str]]:
    """(kind, status, detail) for `value` (base units): each violated assumption, and the bounds when the
    variable declares any."""
    shown = value / meta.scale
    out = [("assumption", "violated", f"{a}, but the value is {shown:g}")
           for a in meta.assumptions if not ASSUMPTIONS[a](value, shown)]
    if meta.bounds is None:
        return out
    lo, hi = meta.bounds.min, meta.bounds.max
    units = f" {meta.units}" if meta.units != "1" else ""
    if (lo is not None and shown < lo) or (hi is not None and shown > hi):
        out.append(("bounds", "violated", f"{shown:g}{units} outside [{lo}, {hi}]"))
    elif lo is not None or hi is not None:
        out.append(("bounds", "satisfied", f"{shown:g}{units} within [{lo}, {hi}]"))
    return out
