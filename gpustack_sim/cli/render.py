"""How values and traces are shown: one place, shared by every command."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..engine.resolver import Resolution


def fmt(value: float | None, expression: str | None, units: str) -> str:
    shown = f"{value:.10g}" if value is not None else expression
    return f"{shown} {units}" if units != "1" else f"{shown}"


def trace_lines(res: Resolution) -> list[str]:
    lines = []
    for s in res.trace:
        value = f"{s.value:.10g}" if isinstance(s.value, float) else s.value
        how = s.relation or s.kind
        tag = f" [{s.kind}{' ' + s.variant if s.variant else ''}]" if s.relation else ""
        ins = ", ".join(f"{k}={v:.6g}" if isinstance(v, float) else f"{k}={v}" for k, v in s.inputs.items())
        units = f" {s.units}" if s.units != "1" else ""
        lines.append(f"  {s.variable} = {value}{units}  <- {how}{tag}" + (f" ({ins})" if ins else "")
                     + (f"  # {s.note}" if s.note else ""))
    return lines
