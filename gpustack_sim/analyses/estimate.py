"""`gpustack estimate`: a training run's time, throughput, memory, energy and cost, each with a
p5/p50/p95 interval, resolved through the catalog.

The point values come from one shared resolution of all figures (a stochastic relation at its mean).
Intervals come from a second, symbolic resolution in which the uncertain roots (fitted parameters with
an `sd`, and any `--sample`) and the variables of stochastic relations stay symbols; each figure is
compiled once with lambdify and evaluated on the same seeded draws, so the intervals of different
figures are consistent with each other.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from gpustack_compiler.base.errors import CatalogError
from gpustack_compiler.language.kinds.distributions import LOGNORMAL

from ..distributed import Backend
from ..engine.bindings import RunFields
from ..engine.cache import remembered, run_key
from ..engine.facts import Facts, Memory
from ..engine.resolver import Resolution, ResolveError, Resolver
from ..engine.run import RunSpec
from ..engine.scenario import Scenario, ScenarioBuilder
from ..engine.serve_run import ServeRunSpec
from .interleave import settle_interleave, split_note
from .uncertainty import PERCENTILES, STAGE_LIMIT, Distribution, Sampler, parse_spec, percentiles
from .uncertainty import held as held_scenario


@dataclass
class Figure:
    label: str
    target: str
    units: str
    value: float | None = None
    interval: dict[int, float] | None = None
    missing: dict[str, dict] = field(default_factory=dict)
    error: str | None = None
    relations: int = 0
    leaves_out: dict[str, str] = field(default_factory=dict)  # "variable=variant" -> what it does not count
    violated: dict[str, str] = field(default_factory=dict)  # violated constraint or validity condition -> detail

    def to_dict(self) -> dict:
        out = {"label": self.label, "target": self.target, "units": self.units, "value": self.value,
               "missing": sorted(self.missing), "error": self.error, "relations": self.relations,
               "leaves_out": dict(sorted(self.leaves_out.items())), "violated": dict(sorted(self.violated.items()))}
        if self.interval:
            out.update({f"p{k}": v for k, v in self.interval.items()})
        return out


@dataclass
class Estimate:
    run: str
    presets: list[str]
    modes: list[str]
    figures: list[Figure]
    memory: dict
    uncertain: dict[str, str]
    samples: int
    seed: int
    resolutions: dict[str, Resolution]
    memory_target: str | None  # the figure the memory fit speaks about (none for a serving run)
    notes: list[str] = field(default_factory=list)  # choices the estimate made for the run (an unset interleave)
    warnings: list[str] = field(default_factory=list)  # a layout that does not fit, a violated constraint
    findings: list[str] = field(default_factory=list)  # a quantity outside its declared range: no such scenario
    unresolved: list[str] = field(default_factory=list)  # labels of required figures that did not resolve

    def to_dict(self) -> dict:
        return {"run": self.run, "presets": self.presets, "modes": self.modes,
                "figures": [f.to_dict() for f in self.figures], "memory": self.memory,
                "uncertain_inputs": self.uncertain, "samples": self.samples, "seed": self.seed,
                "notes": self.notes, "warnings": self.warnings, "findings": self.findings,
                "unresolved_required": self.unresolved}


def fitted_distributions(scenario: Scenario) -> list[Distribution]:
    """Values with an uncertainty (fitted parameters) as lognormal draws: median the fitted value, sigma
    its relative uncertainty, so an efficiency never goes negative."""
    return sorted((Distribution(n, LOGNORMAL, {"median": a.value, "sigma": a.sd / a.value})
                   for n, a in scenario.assignments.items() if a.sd and a.value > 0), key=lambda d: d.name)


def estimate(resolver: Resolver, scenarios: ScenarioBuilder, facts: Facts, run: RunSpec, samples: int, seed: int,
             extra: list[str] = (), backend: Backend | None = None) -> Estimate:
    """A training run's figures (catalog/bindings/figures.yaml) and its memory fit; an interleave the run
    leaves out is chosen (the valid one with the highest throughput) and said in the notes."""
    run, chosen = settle_interleave(resolver, scenarios, facts, run)
    split = split_note(resolver, scenarios, facts, run)
    est = _estimate(resolver, scenarios, facts.run_fields, facts.figures, facts.memory, run, samples, seed, extra,
                    backend, facts.required_figures)
    est.notes.extend(n for n in (chosen, split) if n)
    return est


def serve_estimate(resolver: Resolver, scenarios: ScenarioBuilder, facts: Facts, run: ServeRunSpec, samples: int,
                   seed: int, extra: list[str] = (), backend: Backend | None = None) -> Estimate:
    """A serving run's figures (catalog/bindings/serve_figures.yaml): latency percentiles, the largest batch,
    throughput, energy and cost per million tokens. The KV cache fit is a figure of its own, not a memory fit."""
    serving = facts.serving
    return _estimate(resolver, scenarios, serving.fields, serving.figures, None, run, samples, seed, extra, backend,
                     frozenset())


def _estimate(resolver: Resolver, scenarios: ScenarioBuilder, fields: RunFields, figure_list: list[tuple[str, str]],
              mem: Memory | None, run: RunSpec | ServeRunSpec, samples: int, seed: int, extra: list[str],
              backend: Backend | None, required) -> Estimate:
    scenario = fields.scenario(scenarios, run)
    memory_names = [*mem.parts, mem.per_gpu, mem.capacity] if mem is not None else []
    targets = list(dict.fromkeys([*(t for _, t in figure_list), *memory_names]))
    declared = {t: _declared(resolver, t) for t in targets}
    point = remembered(resolver.memo, run_key("estimate point", scenario, targets),
                       lambda: resolver.resolve_many(targets, scenario))
    dists = sorted(fitted_distributions(scenario) + [parse_spec(s, scenarios) for s in extra], key=lambda d: d.name)
    var = resolver.variable
    uncertain = {d.name: d.describe(var(d.name).scale) for d in dists}
    random = {n: v for r in point.values() if isinstance(r, Resolution) for n, v in r.random.items()}
    uncertain.update({n: v.describe(var(n).scale) for n, v in sorted(random.items())})
    bands = intervals(resolver, scenario, targets, dists, samples, seed, backend=backend) \
        if uncertain and samples else {}
    figures, known = [], {}
    for label, target in figure_list:
        fig = Figure(label, target, declared[target].units)
        res = point[target]
        if isinstance(res, ResolveError):
            fig.error = res.message + (f" ({res.hint})" if res.hint else "")
        else:
            fig.value, fig.missing = res.value, res.missing
            fig.relations = sum(1 for s in res.trace if s.relation)
            fig.interval = bands.get(target)
            fig.leaves_out = _boundaries(resolver, res, known)
            # Relations and their validity conditions, not a variable's declared sign or bounds.
            fig.violated = {c.name: c.detail for c in res.violated if c.kind in ("constraint", "validity")}
        figures.append(fig)
    memory = _memory(point, resolver, mem) if mem is not None else {"status": "unknown"}
    unresolved = [f.label for f in figures if f.target in required and f.value is None]
    warnings, findings = _checks(point, memory)
    return Estimate(run.name, scenario.presets, scenario.modes, figures, memory, uncertain,
                    samples if uncertain and samples else 0, seed,
                    {t: r for t, r in point.items() if isinstance(r, Resolution)},
                    mem.per_gpu if mem is not None else None, [], warnings, findings, unresolved)


# Assumptions (a latency held at zero where it is declared positive) are the fit's business, not the run's.
WARNING_KINDS, FINDING_KINDS = ("constraint", "validity"), ("bounds",)


def _checks(point: dict, memory: dict) -> tuple[list[str], list[str]]:
    """What the resolutions found about the run itself. Warnings: a layout that does not fit in memory, a
    violated constraint (stages holding more layers than the model, a job on more GPUs than its cluster).
    Findings: a quantity outside its declared range, a scenario that cannot exist (a job share above 1)."""
    warnings, findings = [], []
    if memory.get("status", "").startswith("does not fit"):
        used = memory.get("per_gpu", memory.get("per_gpu_without_buffers"))
        warnings.append(f"the layout does not fit in memory: {used:.4g} {memory['per_gpu_units']} per GPU "
                        f"against {memory['capacity']:.4g} {memory['capacity_units']} ({memory['status']})")
    seen = set()
    for res in point.values():
        for check in res.violated if isinstance(res, Resolution) else []:
            if (check.name, check.detail) in seen:
                continue
            seen.add((check.name, check.detail))
            line = f"{check.kind} violated: {check.name}: {check.detail}"
            if check.kind in WARNING_KINDS:
                warnings.append(line)
            elif check.kind in FINDING_KINDS:
                findings.append(line)
    return warnings, findings


def _declared(resolver: Resolver, name: str) -> dict:
    """A figure's variable in the graph; the bindings were checked against the catalog, so a missing one
    means the graph is older or newer than the catalog."""
    meta = resolver.variable(name)
    if meta is None:
        raise CatalogError(f"`{name}` (catalog/bindings/figures.yaml) is not a variable of the graph",
                           "recompile the catalog, and reload Neo4j if it is the source")
    return meta


def _boundaries(resolver: Resolver, res: Resolution, known: dict[str, str | None]) -> dict[str, str]:
    """The accounting boundaries a figure was computed inside: chosen definitions that say what they leave out.
    `known` remembers each variant's answer across figures, which share most of their traces."""
    out = {}
    for step in res.trace:
        # Only variants carry a boundary; asking for them alone, once each, keeps a Neo4j-backed estimate cheap.
        if not step.variant:
            continue
        if step.relation not in known:
            known[step.relation] = (resolver.source.relation(step.relation) or {}).get("leaves_out")
        if known[step.relation]:
            out[f"{step.variable}={step.variant}"] = known[step.relation]
    return out


def intervals(resolver: Resolver, scenario: Scenario, targets: list[str], dists: list[Distribution],
              samples: int, seed: int, at: Sequence[int] = PERCENTILES,
              backend: Backend | None = None) -> dict[str, dict[int, float]]:
    names = [d.name for d in dists]
    held = held_scenario(resolver, scenario, dists)
    symbolic = remembered(resolver.memo, run_key("estimate intervals", held, targets, STAGE_LIMIT),
                          lambda: resolver.resolve_many(targets, held, stage_limit=STAGE_LIMIT, monte_carlo=True))
    out, varying = {}, {}
    for target, res in symbolic.items():
        if isinstance(res, ResolveError) or res.missing:
            continue
        if res.value is not None:
            out[target] = {p: res.value for p in at}
        else:
            varying[target] = res
    # the printed numpy sources of the compiled targets, kept with the resolution (a target's key is `=NAME`)
    sources = remembered(resolver.memo, run_key("estimate interval sources", held, targets, STAGE_LIMIT), dict,
                         lambda _: True)
    values = Sampler([resolver.symbol(n) for n in names], dists, varying, seed, sources).run(samples, backend) \
        if varying else {}
    for target in symbolic:
        if target in values:
            shown = values[target] / resolver.variable(target).scale
            finite = shown[np.isfinite(shown)]
            if finite.size:
                out[target] = percentiles(finite, at)
    return out


def _memory(point: dict, resolver: Resolver, mem: Memory) -> dict:
    """Memory per GPU against capacity. Runtime buffers have no source and stay a missing root: then the
    fit is reported as the headroom left for them, not decided by an invented number."""
    used, cap = point.get(mem.per_gpu), point.get(mem.capacity)
    if not isinstance(used, Resolution) or not isinstance(cap, Resolution) or cap.value is None:
        return {"status": "unknown"}
    scale = resolver.variable(mem.per_gpu).scale
    capacity = cap.value * resolver.variable(cap.target).scale
    parts = {p: {"value": point[p].value, "units": point[p].units, "missing": sorted(point[p].missing)}
             for p in mem.parts if isinstance(point.get(p), Resolution)}
    out = {"per_gpu_units": used.units, "capacity": cap.value, "capacity_units": cap.units, "breakdown": parts}
    if used.value is not None:
        fits = used.value * scale <= capacity
        return {**out, "status": "fits" if fits else "does not fit", "per_gpu": used.value}
    if set(used.missing) != {mem.buffers}:
        return {**out, "status": "unknown", "missing": sorted(used.missing)}
    without = float(used.symbolic.xreplace({resolver.symbol(mem.buffers): 0}))
    headroom = (capacity - without) / scale
    status = "fits if buffers stay below the headroom" if headroom > 0 else "does not fit (before any buffers)"
    return {**out, "status": status, "per_gpu_without_buffers": without / scale, "headroom_for_buffers": headroom}
