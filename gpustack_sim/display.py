"""How values are shown: one place, shared by every command."""

from __future__ import annotations


def fmt(value: float | None, expression: str | None, units: str) -> str:
    shown = f"{value:.10g}" if value is not None else expression
    return f"{shown} {units}" if units != "1" else f"{shown}"
