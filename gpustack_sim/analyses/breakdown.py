"""What a figure of an estimate is made of, as parts that add up to it: the step time as compute, bubble,
exposed communication, memory-bound time and overhead; the cost per token as capital by part and energy.

The parts are read off the resolution trace, never off names in code: a figure splits into the inputs of
its defining relation that carry the figure's own dimension (what the relation adds up), and the rest of
the figure is the remainder (for the step time, the overhead that stretches the sum). A figure that is a
product (cost per token = total cost / tokens, capital cost = rate x time) splits as the one factor of the
product that itself splits, scaled by the others. What the estimate leaves out has no value and stays a
named boundary beside the parts.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import sympy

from gpustack_compiler.language.expressions import SympyBuilder, parse

from ..engine.resolver import Resolution, Step
from .estimate import Estimate, fitted_distributions, intervals
from .uncertainty import parse_spec

# A remainder below this share of the figure is rounding, not a part.
REMAINDER_SHARE = 1e-9
# How many products deep a split may look for a sum (cost per token -> total cost is one; capital cost ->
# job capital rate -> site capital rate is three).
PRODUCT_DEPTH = 4


@dataclass
class Part:
    label: str
    variable: str | None  # the catalog variable the part is a scaled copy of; None for the remainder
    value: float  # in the figure's declared units
    interval: dict[int, float] | None = None
    parent: str | None = None  # the part this one splits (None at the first level)
    note: str | None = None

    def to_dict(self) -> dict:
        out = {"label": self.label, "variable": self.variable, "value": self.value, "parent": self.parent,
               "note": self.note}
        if self.interval:
            out.update({f"p{k}": v for k, v in self.interval.items()})
        return out


@dataclass
class Breakdown:
    figure: str  # the figure's label
    target: str
    units: str
    value: float | None
    interval: dict[int, float] | None
    parts: list[Part] = field(default_factory=list)
    leaves_out: dict[str, str] = field(default_factory=dict)
    reason: str | None = None  # why there are no parts

    def to_dict(self) -> dict:
        out = {"figure": self.figure, "target": self.target, "units": self.units, "value": self.value,
               "parts": [p.to_dict() for p in self.parts], "leaves_out": dict(sorted(self.leaves_out.items())),
               "reason": self.reason}
        if self.interval:
            out.update({f"p{k}": v for k, v in self.interval.items()})
        return out


class _Splitter:
    """Splits variables of one resolution into additive parts (in base units)."""

    def __init__(self, engine, res: Resolution):
        self.engine = engine
        self.steps: dict[str, Step] = {s.variable: s for s in res.trace}

    def dimension(self, name: str):
        meta = self.engine.resolver.variable(name) or self.engine.source.constant(name)
        return None if meta is None else meta.dimension

    def value(self, name: str) -> float | None:
        step = self.steps.get(name)
        return step.raw_value if step is not None and isinstance(step.raw_value, float) else None

    def expression(self, relation: str) -> tuple[sympy.Basic, dict[sympy.Symbol, str]] | None:
        rel = self.engine.source.relation(relation) or {}
        text = (rel.get("parts") or {}).get("expression")
        if text is None:
            return None
        names: dict[sympy.Symbol, str] = {}

        def symbol(name: str) -> sympy.Symbol:
            sym = sympy.Symbol(name.replace(".", "__"))
            names[sym] = name
            return sym

        expr = SympyBuilder(symbol, lambda u: self.engine.units.parse(u).scale).build(parse(text))
        return expr, names

    def split(self, name: str, depth: int = 0) -> list[tuple[str | None, float]] | None:
        """(variable, base value) parts of `name` that add up to its value; None when it does not split."""
        step, total = self.steps.get(name), self.value(name)
        if step is None or step.relation is None or total is None or total == 0:
            return None
        dim = self.dimension(name)
        same = [(n, self.value(n)) for n in sorted(step.raw_inputs) if self.dimension(n) == dim]
        same = [(n, v) for n, v in same if v is not None]
        if same and all(v >= 0 for _, v in same) and sum(v for _, v in same) <= total * (1 + 1e-9):
            rest = total - sum(v for _, v in same)
            # A remainder is a part when it is not rounding, or when other inputs (an overhead fraction) make it
            # one, even at zero: then the chart says the overhead is nothing rather than leaving it out.
            if len(same) > 1:
                overhead = rest > abs(total) * REMAINDER_SHARE or len(same) < len(step.raw_inputs)
                return same + [(None, max(rest, 0.0))] if overhead else same
            # One part: the relation passes it on (a share or a unit change); look into it.
            return self._scaled(same[0][0], total, depth)
        if depth >= PRODUCT_DEPTH:
            return None
        parsed = self.expression(step.relation)
        if parsed is None or not parsed[0].is_Mul:
            return None
        expr, names = parsed
        # The factors that enter the product linearly: scaling one scales the product.
        for factor in sorted((f for f in expr.args if f.is_Symbol), key=lambda f: names[f]):
            inner = self._scaled(names[factor], total, depth)
            if inner:
                return inner
        return None

    def _scaled(self, name: str, total: float, depth: int) -> list[tuple[str | None, float]] | None:
        """The parts of `name`, scaled so that they add up to `total`."""
        inner, value = self.split(name, depth + 1), self.value(name)
        if not inner or not value:
            return None
        return [(n, v * total / value) for n, v in inner]


def breakdown(engine, run, est: Estimate, label: str, sub_split: bool = True, sample: list[str] = ()) -> Breakdown:
    """The additive parts of the figure `label` of `est` (an estimate of `run` by `engine`, with the extra
    uncertain roots `sample` it was given), each with its interval. With `sub_split`, a part splits once
    more (the capital cost into its facility and IT parts)."""
    fig = next(f for f in est.figures if label in (f.label, f.target))
    out = Breakdown(fig.label, fig.target, fig.units, fig.value, fig.interval, leaves_out=dict(fig.leaves_out))
    res = est.resolutions.get(fig.target)
    if res is None or fig.value is None:
        out.reason = fig.error or f"{fig.target} is not resolved ({len(fig.missing)} missing root(s))"
        return out
    splitter = _Splitter(engine, res)
    first = splitter.split(fig.target)
    if not first:
        out.reason = f"the relation defining {fig.target} is not a sum of parts"
        return out
    scale = res.scale
    relation = splitter.steps[fig.target].relation
    dim = splitter.dimension(fig.target)
    others = sorted(n for n in splitter.steps[fig.target].raw_inputs if splitter.dimension(n) != dim)
    for var, base in first:
        if var is None:
            through = f" (through {', '.join(others)})" if others else ""
            out.parts.append(Part("overhead", None, base / scale,
                                  note=f"what {relation} adds beyond the sum of its parts{through}"))
            continue
        out.parts.append(Part(_label(var), var, base / scale))
    _intervals(engine, run, est, splitter, out.parts, list(sample))
    if sub_split:
        out.parts = [sub for part in out.parts for sub in _sub_parts(splitter, part)]
    return out


def _sub_parts(splitter: _Splitter, part: Part) -> list[Part]:
    """A part split once more, each piece its share of the part (the interval too: the share is taken at its
    point value, so the piece carries the part's uncertainty, not the share's)."""
    inner = splitter.split(part.variable) if part.variable else None
    if not inner or len(inner) < 2:
        return [part]
    total = sum(v for _, v in inner)
    pieces = []
    for name, v in inner:
        share = v / total
        interval = {k: x * share for k, x in part.interval.items()} if part.interval else None
        note = f"{share:.4g} of {part.variable}" + (" (share at its point value)" if interval else "")
        pieces.append(Part(_label(name) if name else f"rest of {part.label}", name, part.value * share, interval,
                           parent=part.variable, note=note))
    return pieces


def _label(name: str) -> str:
    """A variable's name without its system prefix: the parts of one figure rarely share a name beyond it."""
    return name.split(".", 1)[1]


def _intervals(engine, run, est: Estimate, splitter: _Splitter, parts: list[Part], sample: list[str]) -> None:
    """Each part's interval: its variable's, scaled as the point value is (by a constant, such as 1 / tokens;
    the same seeded draws as the estimate's intervals, so parts and figures are consistent)."""
    wanted = sorted({p.variable for p in parts if p.variable})
    if not wanted or not est.uncertain or not est.samples:
        return
    scenario = engine.run_scenario(run)
    dists = fitted_distributions(scenario)
    dists = sorted(dists + [parse_spec(s, engine.scenarios) for s in sample], key=lambda d: d.name)
    bands = intervals(engine.resolver, scenario, wanted, dists, est.samples, est.seed)
    for p in parts:
        band = bands.get(p.variable) if p.variable else None
        point = splitter.value(p.variable) if p.variable else None
        if band is None or not point:
            continue
        # The part in the figure's units per unit of the variable in its own declared units.
        factor = p.value / (point / engine.resolver.variable(p.variable).scale)
        p.interval = {k: v * factor for k, v in band.items()}
