"""`gpustack resolve`: one target, with trace, missing roots, checks and optional Monte Carlo."""

from __future__ import annotations

import typer

from .app import AllowViolationsOpt, JsonOpt, Neo4jOpt, app, engine, err, out, pairs, seed_option
from .render import fmt, trace_lines
from .workers import SchedulerOpt, WorkersOpt, chunked


@app.command()
def resolve(ctx: typer.Context, target: str,
            preset: list[str] = typer.Option([], "--preset", help="Preset(s) to apply, in order; later ones win."),
            assign: list[str] = typer.Option([], "--assign", help="NAME=VALUE with units, e.g. gpu.power.total='0.5 kW'."),
            variant: list[str] = typer.Option([], "--variant", help="NAME=KEY variant selection."),
            mode: list[str] = typer.Option([], "--mode", help="Variant KEY chosen wherever a variable has it "
                                           "(dense, gqa, adamw, ...); --variant wins."),
            trace: bool = typer.Option(False, "--trace", help="Show every step."),
            missing_families: bool = typer.Option(False, "--missing-families", help="List missing roots by family."),
            constraints: bool = typer.Option(False, "--constraints", help="Show constraint, bound and validity checks."),
            fail_on_violated: bool = typer.Option(False, "--fail-on-violated-constraints",
                                                  help="Exit 1 if any check is violated."),
            fallback: bool = typer.Option(False, "--fallback-on-invalid",
                                          help="Use another definition when an approximation's validity fails."),
            solve: bool = typer.Option(False, "--solve", help="Solve small groups of equations for missing roots."),
            sample: list[str] = typer.Option([], "--sample", help="NAME~normal(mean, sd) | lognormal(median, sigma) "
                                             "| uniform(low, high) | exponential(rate): Monte Carlo over this "
                                             "root (and the stochastic relations in the cone)."),
            samples: int = typer.Option(10000, "--samples", help="Monte Carlo sample count."),
            seed: int = seed_option(),
            workers: int = WorkersOpt, scheduler: str = SchedulerOpt,
            allow_violations: bool = AllowViolationsOpt,
            as_json: bool = JsonOpt, neo4j: bool = Neo4jOpt) -> None:
    """Resolve TARGET from presets and assignments, with trace, missing roots and checks."""
    eng = engine(ctx, neo4j, allow_violations)
    eng.variable(target)
    scenario = eng.scenario(preset, pairs(assign, "--assign", "NAME=VALUE, e.g. gpu.power.total='0.5 kW'"),
                            pairs(variant, "--variant", "NAME=KEY, e.g. training.flops_per_step=dense"), mode)
    res = eng.resolve(target, scenario, fallback_on_invalid=fallback, solve=solve)
    data = {**res.to_dict(), "presets": scenario.presets}
    lines = [f"{target} = {fmt(res.value, res.expression, res.units)}"]
    if sample:
        with chunked("samples", workers, scheduler) as (client, _):
            summary = eng.sample(target, scenario, [eng.distribution(s) for s in sample], samples, seed, client)
        data["uncertainty"] = summary.to_dict()
        p = summary.percentiles
        lines.append(f"  p5 {p[5]:.6g}  p50 {p[50]:.6g}  p95 {p[95]:.6g} {res.units}  (mean {summary.mean:.6g}, "
                     f"sd {summary.sd:.3g}; {samples} samples, seed {seed})")
        lines.extend(f"  sampled {k} ~ {v}" for k, v in summary.inputs.items())
    if res.missing:
        lines.append(f"  symbolic in {len(res.missing)} missing root(s): {', '.join(sorted(res.missing))}")
    for name, roots in res.unevaluated.items():
        lines.append(f"  {name} left unevaluated: its relation needs {', '.join(roots) or 'numeric inputs'}")
    if missing_families and res.missing:
        lines.append("missing roots by family:")
        for family, info in res.missing_by_family().items():
            lines.append(f"  {family} ({info['category']}): {', '.join(info['roots'])}")
    if res.solved:
        lines.append("solved: " + ", ".join(f"{k} = {v:.10g}" for k, v in sorted(res.solved.items())))
    if res.fallbacks:
        lines.append("fallbacks: " + "; ".join(res.fallbacks))
    if trace:
        lines.append("trace:")
        lines.extend(trace_lines(res))
    if constraints or res.violated:
        shown = res.checks if constraints else res.violated
        lines.append("checks:")
        lines.extend(f"  {c.status:<12} {c.kind:<10} {c.name}: {c.detail}" for c in shown)
    out(data, "\n".join(lines), as_json)
    if res.unevaluated:
        # The value stands in a variable that is no root: it is not an answer in the missing roots.
        if not as_json:
            err(f"{len(res.unevaluated)} relation(s) could not be evaluated: {', '.join(res.unevaluated)}")
        raise typer.Exit(1)
    if fail_on_violated and res.violated:
        if not as_json:
            err(f"{len(res.violated)} check(s) violated")
        raise typer.Exit(1)
