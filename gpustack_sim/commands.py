"""The engine's commands: resolve, presets, scenario."""

from __future__ import annotations

from pathlib import Path

import typer

from gpustack_compiler.cli import Neo4jOpt, JsonOpt, app, compile_or_fail, err, out, settings
from gpustack_compiler.errors import UsageError
from gpustack_compiler.source import GraphSource, ManifestSource
from gpustack_compiler.suggest import did_you_mean
from gpustack_compiler.units import UnitSystem

from .resolver import Resolution, ResolveError, Resolver
from .scenario import Scenario, ScenarioBuilder
from .estimate import Estimate, estimate
from .run import load_run
from .uncertainty import MonteCarlo, parse_spec

presets_app = typer.Typer(no_args_is_help=True, help="Named scenarios shipped in catalog/presets.")
scenario_app = typer.Typer(no_args_is_help=True, help="Resolve a preset's advertised targets and report.")
app.add_typer(presets_app, name="presets")
app.add_typer(scenario_app, name="scenario")


class Engine:
    """The manifest (presets, units) plus a graph source (the manifest itself, or Neo4j)."""

    def __init__(self, ctx: typer.Context, use_neo4j: bool):
        self.manifest = compile_or_fail(settings(ctx)).manifest
        if use_neo4j:
            from gpustack_compiler.neo4j_source import Neo4jSource

            self.source: GraphSource = Neo4jSource.from_env()
        else:
            self.source = ManifestSource(self.manifest)
        self.scenarios = ScenarioBuilder(self.manifest)
        self.resolver = Resolver(self.source, UnitSystem.from_manifest(self.manifest["units"]))

    def require_variable(self, name: str) -> None:
        if name not in self.manifest["variables"]:
            raise UsageError(f"unknown variable `{name}`", did_you_mean(name, self.manifest["variables"]))


def fmt(value: float | None, expression: str | None, units: str) -> str:
    shown = f"{value:.10g}" if value is not None else expression
    return f"{shown} {units}" if units != "1" else f"{shown}"


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
            sample: list[str] = typer.Option([], "--sample", help="NAME~normal(mu, sd) | lognormal(median, sigma) "
                                             "| uniform(low, high): Monte Carlo over this root."),
            samples: int = typer.Option(10000, "--samples", help="Monte Carlo sample count."),
            seed: int = typer.Option(0, "--seed", help="Random seed (same seed, same output)."),
            as_json: bool = JsonOpt, neo4j: bool = Neo4jOpt) -> None:
    """Resolve TARGET from presets and assignments, with trace, missing roots and checks."""
    engine = Engine(ctx, neo4j)
    engine.require_variable(target)
    scenario = engine.scenarios.build(preset, assign, variant, mode)
    res = engine.resolver.resolve(target, scenario, fallback_on_invalid=fallback, solve=solve)
    data = {**res.as_dict(), "presets": scenario.presets}
    lines = [f"{target} = {fmt(res.value, res.expression, res.units)}"]
    if sample:
        dists = [parse_spec(s, engine.scenarios) for s in sample]
        summary = MonteCarlo(engine.resolver).run(target, scenario, dists, samples, seed)
        data["uncertainty"] = summary.as_dict()
        p = summary.percentiles
        lines.append(f"  p5 {p[5]:.6g}  p50 {p[50]:.6g}  p95 {p[95]:.6g} {res.units}  (mean {summary.mean:.6g}, "
                     f"sd {summary.sd:.3g}; {samples} samples, seed {seed})")
        lines.extend(f"  sampled {k} ~ {v}" for k, v in summary.inputs.items())
    if res.missing:
        lines.append(f"  symbolic in {len(res.missing)} missing root(s): {', '.join(sorted(res.missing))}")
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
        lines.extend(_trace_lines(res))
    if constraints or res.violated:
        shown = res.checks if constraints else res.violated
        lines.append("checks:")
        lines.extend(f"  {c.status:<12} {c.kind:<10} {c.name}: {c.detail}" for c in shown)
    out(data, "\n".join(lines), as_json)
    if fail_on_violated and res.violated:
        if not as_json:
            err(f"{len(res.violated)} check(s) violated")
        raise typer.Exit(1)


def _trace_lines(res: Resolution) -> list[str]:
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


@presets_app.command("list")
def presets_list(ctx: typer.Context, as_json: bool = JsonOpt) -> None:
    """Every preset with its provenance, size and advertised targets."""
    manifest = compile_or_fail(settings(ctx)).manifest
    rows = [{"name": n, "provenance": p["provenance"], "assignments": len(p["assignments"]),
             "variants": p["variants"], "targets": p["targets"], "description": p["description"]}
            for n, p in sorted(manifest["presets"].items())]
    lines = [f"{'preset':<36}{'provenance':<20}{'values':>7}  targets"]
    lines += [f"{r['name']:<36}{r['provenance']:<20}{r['assignments']:>7}  {', '.join(r['targets'].values())}"
              for r in rows]
    out(rows, "\n".join(lines), as_json)


def report(engine: Engine, preset: str, extra_targets: list[str]) -> dict:
    """Resolve a preset's targets; each gets a status: ok, issues (missing or violated) or error."""
    scenario: Scenario = engine.scenarios.build([preset], [], [])
    targets = dict(engine.manifest["presets"][preset]["targets"])
    for item in extra_targets:
        label, sep, var = item.partition("=")
        if not sep:
            raise UsageError(f"--target {item!r}: expected LABEL=VARIABLE")
        engine.require_variable(var)
        targets[label] = var
    rows = []
    for label, var in targets.items():
        try:
            res = engine.resolver.resolve(var, scenario)
        except ResolveError as exc:
            rows.append({"label": label, "target": var, "status": "error", "error": exc.message})
            continue
        status = "ok" if not res.missing and not res.violated else "issues"
        rows.append({"label": label, "target": var, "status": status, "value": res.value,
                     "expression": res.expression, "units": res.units, "missing_count": len(res.missing),
                     "missing": sorted(res.missing), "violated": [c.as_dict() for c in res.violated],
                     "relations": [s.relation for s in res.trace if s.relation]})
    counts = {s: sum(r["status"] == s for r in rows) for s in ("ok", "issues", "error")}
    overall = "error" if counts["error"] else ("issues" if counts["issues"] else "ok")
    return {"preset": preset, "status": overall, "counts": counts, "targets": rows}


def report_lines(rep: dict) -> list[str]:
    lines = [f"{rep['preset']}: {rep['status']} ({', '.join(f'{v} {k}' for k, v in rep['counts'].items())})"]
    for r in rep["targets"]:
        if r["status"] == "error":
            lines.append(f"  error   {r['label']} ({r['target']}): {r['error']}")
            continue
        lines.append(f"  {r['status']:<7} {r['label']} = {fmt(r['value'], r['expression'], r['units'])}"
                     f"  ({r['target']}; {len(r['relations'])} relations)")
        if r["missing"]:
            lines.append(f"          missing {r['missing_count']}: {', '.join(r['missing'])}")
        for c in r["violated"]:
            lines.append(f"          violated {c['kind']} {c['name']}: {c['detail']}")
    return lines


@scenario_app.command("report")
def scenario_report(ctx: typer.Context, preset: str,
                    target: list[str] = typer.Option([], "--target", help="LABEL=VARIABLE, added to the preset's own."),
                    fail_on_issues: bool = typer.Option(False, "--fail-on-issues", help="Exit 1 unless all are ok."),
                    as_json: bool = JsonOpt, neo4j: bool = Neo4jOpt) -> None:
    """Per target: status, value, missing roots, violated constraints, relations used."""
    engine = Engine(ctx, neo4j)
    if preset not in engine.manifest["presets"]:
        raise UsageError(f"unknown preset `{preset}`", did_you_mean(preset, engine.manifest["presets"]))
    rep = report(engine, preset, target)
    out(rep, "\n".join(report_lines(rep)), as_json)
    if fail_on_issues and rep["status"] != "ok":
        raise typer.Exit(1)


@scenario_app.command("audit")
def scenario_audit(ctx: typer.Context, as_json: bool = JsonOpt, neo4j: bool = Neo4jOpt) -> None:
    """Every sourced preset against the targets it advertises; exit 1 if any is not ok."""
    engine = Engine(ctx, neo4j)
    sourced = [n for n, p in sorted(engine.manifest["presets"].items()) if p["provenance"] == "sourced"]
    reports = [report(engine, name, []) for name in sourced]
    lines = []
    for rep in reports:
        lines.extend(report_lines(rep))
    bad = [r["preset"] for r in reports if r["status"] != "ok"]
    lines.append(f"{len(reports)} sourced preset(s), {len(reports) - len(bad)} ok" +
                 (f"; not ok: {', '.join(bad)}" if bad else ""))
    out({"presets": reports, "not_ok": bad}, "\n".join(lines), as_json)
    if bad:
        raise typer.Exit(1)


@app.command("estimate")
def estimate_cmd(ctx: typer.Context, run_file: Path = typer.Argument(..., help="Run file (schemas/run.schema.json)."),
                 set_: list[str] = typer.Option([], "--set", help="Override a run-file field: layout.tp=4, gpus=512."),
                 sample: list[str] = typer.Option([], "--sample", help="Extra uncertain root: NAME~normal(mu, sd) ..."),
                 samples: int = typer.Option(10000, "--samples", min=2, help="Monte Carlo samples."),
                 seed: int = typer.Option(0, "--seed", help="Random seed (same seed, same output)."),
                 trace: list[str] = typer.Option([], "--trace", help="Show what a figure is made of (label or name)."),
                 as_json: bool = JsonOpt, neo4j: bool = Neo4jOpt) -> None:
    """Step time, throughput, utilization, memory fit, energy and cost of a training run, with intervals."""
    run = load_run(run_file, set_)
    engine = Engine(ctx, neo4j)
    est = estimate(engine.resolver, engine.scenarios, run, samples, seed, sample)
    data = est.as_dict()
    lines = estimate_lines(est)
    for name in trace:
        fig = next((f for f in est.figures if name in (f.label, f.target)), None)
        if fig is None:
            raise UsageError(f"--trace {name!r}: not a figure of the estimate",
                             did_you_mean(name, [f.target for f in est.figures] + [f.label for f in est.figures]))
        res = est.resolutions.get(fig.target)
        lines.append(f"trace of {fig.target}:")
        lines.extend(_trace_lines(res) if res else [f"  {fig.error}"])
        data.setdefault("traces", {})[fig.target] = [s.as_dict() for s in res.trace] if res else []
    out(data, "\n".join(lines), as_json)


def estimate_lines(est: Estimate) -> list[str]:
    lines = [f"estimate for {est.run}", f"  presets: {', '.join(est.presets)}; modes: {', '.join(est.modes)}"]
    width = max(len(f.label) for f in est.figures)
    for f in est.figures:
        if f.error:
            lines.append(f"  {f.label:<{width}}  not resolved: {f.error}")
        elif f.value is None:
            lines.append(f"  {f.label:<{width}}  not resolved: {len(f.missing)} missing root(s)")
        else:
            shown = fmt(f.value, None, f.units)
            band = (f"   [p5 {f.interval[5]:.4g}, p50 {f.interval[50]:.4g}, p95 {f.interval[95]:.4g}]"
                    if f.interval else "")
            lines.append(f"  {f.label:<{width}}  {shown}{band}")
    mem = est.memory
    if mem["status"] != "unknown":
        parts = ", ".join(f"{k.rsplit('.', 1)[-1]} {v['value']:.4g} {v['units']}" for k, v in mem["breakdown"].items()
                          if v["value"] is not None)
        lines.append(f"memory: {mem['per_gpu']:.4g} {mem['per_gpu_units']} per GPU of {mem['capacity']:.4g} "
                     f"{mem['capacity_units']}: {mem['status'].upper() if mem['status'] != 'fits' else 'fits'}"
                     + (f" ({parts})" if parts else ""))
    missing: dict[str, set] = {}
    for f in est.figures:
        for name, meta in f.missing.items():
            missing.setdefault(f"{meta.get('family')} ({meta.get('category')})", set()).add(name)
    if missing:
        lines.append("missing roots by family:")
        lines.extend(f"  {fam}: {', '.join(sorted(names))}" for fam, names in sorted(missing.items()))
    if est.uncertain:
        lines.append(f"intervals: {est.samples} samples, seed {est.seed}, over "
                     + "; ".join(f"{k} ~ {v}" for k, v in est.uncertain.items()))
    else:
        lines.append("intervals: none (no uncertain inputs; calibrate, or pass --sample)")
    return lines
