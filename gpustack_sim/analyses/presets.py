"""A preset's report: every target it advertises, resolved from that preset alone."""

from __future__ import annotations

from collections.abc import Mapping

from gpustack_compiler.base.errors import InputError
from gpustack_compiler.base.suggest import did_you_mean

from ..engine.resolver import ResolveError, Resolver
from ..engine.scenario import ScenarioBuilder


def report(resolver: Resolver, scenarios: ScenarioBuilder, preset: str, extra: Mapping[str, str]) -> dict:
    """Resolve a preset's advertised targets (and `extra`, label -> variable); each gets a status: ok,
    issues (missing or violated) or error."""
    if preset not in scenarios.presets:
        raise InputError(f"unknown preset `{preset}`", did_you_mean(preset, scenarios.presets))
    scenario = scenarios.build([preset])
    targets = {**scenarios.presets[preset]["targets"], **extra}
    for var in extra.values():
        scenarios.variable(var, "--target")
    rows = []
    for label, var in targets.items():
        try:
            res = resolver.resolve(var, scenario)
        except ResolveError as exc:
            rows.append({"label": label, "target": var, "status": "error", "error": exc.message})
            continue
        status = "ok" if not res.missing and not res.violated else "issues"
        rows.append({"label": label, "target": var, "status": status, "value": res.value,
                     "expression": res.expression, "units": res.units, "missing_count": len(res.missing),
                     "missing": sorted(res.missing), "violated": [c.to_dict() for c in res.violated],
                     "relations": [s.relation for s in res.trace if s.relation]})
    counts = {s: sum(r["status"] == s for r in rows) for s in ("ok", "issues", "error")}
    overall = "error" if counts["error"] else ("issues" if counts["issues"] else "ok")
    return {"preset": preset, "status": overall, "counts": counts, "targets": rows}
