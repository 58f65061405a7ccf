"""Model-form error: how far the model's point predictions land from end-to-end measurements of runs it was
never fitted to, turned into an interval term by cross-validation over the evaluation panels.

The parameter spread (`estimate.intervals`) says how unsure the fitted parameters are; it says nothing about
what the equations leave out. That second part is estimated from evaluation residuals, r = ln(predicted /
measured), leaving out the panel being scored (cross-conformal by panel): a row of panel P takes the
ceil(level (n + 1))-th smallest |r| of the n rows of the other panels in its stratum, the split-conformal
quantile, which needs n >= level / (1 - level) rows (9 at 90%). The residuals set only the interval's width;
they never choose a model change (docs/model-changes.md).

A row's stratum says what differs between runs: training or serving, hardware generation, dense or MoE (and
MoE whose expert group leaves the node), the software preset the run names, and its scale. The most specific
stratum with enough rows of other panels is used. Where the row's own value of an attribute occurs in no
other panel (a new generation, expert parallelism across nodes no panel has, a software stack no panel used),
the row is outside the territory the panels cover: its half-width is the largest |r| of the broader stratum,
and the row says why. With too few rows even in its workload, the term abstains at that level and says so."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from ..engine.facts import Facts

# Strata from the most specific to the broadest; each drops the attribute least tied to the error.
ATTRIBUTES = ("workload", "generation", "kind", "software", "scale")
LEVELS = (ATTRIBUTES, ("workload", "generation", "kind"), ("workload", "kind"), ("workload",))
# GPUs in a run (training) or a replica (serving): one node, up to a thousand, beyond.
SCALE_BANDS = ((8, "node"), (1024, "cluster"))
# GPUs an NVLink domain holds in every node preset the panels use (DGX/HGX A100, H100, H800): an expert group
# larger than this crosses nodes.
SCALE_UP_GPUS = 8


@dataclass(frozen=True)
class Stratum:
    workload: str  # training | serving
    generation: str  # a key of calibration_fit.yaml components.generations, or 'unknown'
    kind: str  # dense | moe | moe_cross_node
    software: str  # the software presets the run names, '+'-joined, or 'none'
    scale: str  # node | cluster | large


@dataclass(frozen=True)
class Residual:
    panel: str
    stratum: Stratum
    log_error: float  # ln(predicted / measured)


@dataclass(frozen=True)
class Term:
    """The model-form half-width (in ln units) of one row at one level, or an abstention."""

    level: float
    half_width: float | None  # None: abstains
    stratum: tuple[str, ...]  # the attributes matched
    n: int  # rows of other panels it was estimated from
    outside: tuple[str, ...]  # attributes whose value no other panel has (the row is outside their territory)
    reason: str

    def to_dict(self) -> dict:
        return asdict(self)


def stratum(run, facts: Facts) -> Stratum:
    """The stratum of a training or serving run, from its fields and the presets it names."""
    from ..engine.serve_run import ServeRunSpec

    presets = run.presets_in_order()
    generation = next((g.key for g in facts.generations.values() if set(g.gpu_presets) & set(presets)), "unknown")
    software = "+".join(sorted(p for p in presets if p.endswith("_software"))) or "none"
    serving = isinstance(run, ServeRunSpec)
    moe = run.model.moe is not None
    layout = run.layout
    ep_span = layout.ep * (layout.etp or layout.tp) if moe else 1
    kind = "dense" if not moe else "moe_cross_node" if ep_span > SCALE_UP_GPUS else "moe"
    gpus = layout.tp * layout.pp if serving else run.gpus
    scale = next((name for top, name in SCALE_BANDS if gpus <= top), "large")
    return Stratum("serving" if serving else "training", generation, kind, software, scale)


def rows_needed(level: float) -> int:
    """Fewest rows for a finite split-conformal quantile: ceil(level (n + 1)) <= n."""
    return math.ceil(level / (1 - level) - 1e-9)


def term(row: Stratum, pool: Sequence[Residual], level: float) -> Term:
    """The model-form half-width of a row of stratum `row` from `pool`, the residuals of the other panels."""
    need = rows_needed(level)
    outside = tuple(a for a in ATTRIBUTES[1:] if not any(getattr(r.stratum, a) == getattr(row, a) for r in pool))
    # Rows of a narrower stratum too few for a quantile still show how far that kind of run lands: the
    # broader stratum's width is never narrower than the largest of their errors.
    floor, floor_from = 0.0, ""
    for attrs in LEVELS:
        label = "/".join(getattr(row, a) for a in attrs)
        mine = sorted(abs(r.log_error) for r in pool if all(getattr(r.stratum, a) == getattr(row, a) for a in attrs))
        if len(mine) < need:
            if mine:
                floor, floor_from = mine[-1], f"; at least the largest error of the {len(mine)} {label} rows"
            continue
        unseen = tuple(a for a in outside if a not in attrs)
        if unseen:
            names = ", ".join(f"{a} {getattr(row, a)}" for a in unseen)
            return Term(level, mine[-1], attrs, len(mine), unseen,
                        f"outside the panels' territory (no other panel has {names}): the largest error of "
                        f"{len(mine)} {label} rows")
        k = math.ceil(level * (len(mine) + 1))
        return Term(level, max(mine[k - 1], floor), attrs, len(mine), (),
                    f"{len(mine)} rows of other panels in {label}" + (floor_from if floor > mine[k - 1] else ""))
    have = sum(r.stratum.workload == row.workload for r in pool)
    return Term(level, None, (), have, outside,
                f"abstains: {have} {row.workload} rows of other panels, {need} needed at {round(100 * level)}%")


def combine(predicted: float, band: tuple[float, float] | None, half_width: float) -> tuple[float, float]:
    """The interval with the model-form term: its ln half-width added in quadrature to each side of the
    parameter band (the two are taken as independent)."""
    lo_p = math.log(predicted / band[0]) if band else 0.0
    hi_p = math.log(band[1] / predicted) if band else 0.0
    return (predicted * math.exp(-math.hypot(half_width, max(lo_p, 0.0))),
            predicted * math.exp(math.hypot(half_width, max(hi_p, 0.0))))


def residuals_of(rows: Sequence[dict]) -> list[Residual]:
    """The residuals of `validate`'s scored rows (each carries its stratum)."""
    return [Residual(r["panel"], Stratum(**r["stratum"]), math.log(r["predicted"] / r["measured"])) for r in rows]


def for_run(run, facts: Facts, rows: Sequence[dict], levels: Sequence[float]) -> dict:
    """The model-form term of a run no panel holds, from every scored evaluation row: its stratum, and per
    level the half-width (or the abstention) with its reason."""
    s = stratum(run, facts)
    pool = residuals_of(rows)
    return {"stratum": asdict(s), "rows": len(pool),
            "terms": {f"{round(100 * level)}%": term(s, pool, level).to_dict() for level in levels}}
