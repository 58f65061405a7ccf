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
from .estimate import Estimate, estimate, fitted_distributions
from .run import load_run
from .uncertainty import Distribution, MonteCarlo, parse_spec

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


def _calibration_dir(ctx: typer.Context, data: Path | None) -> Path:
    if data is not None:
        return data
    return settings(ctx).catalog.resolve().parent.parent / "shared" / "data" / "calibration"


@app.command("calibrate")
def calibrate_cmd(ctx: typer.Context,
                  data: Path = typer.Option(None, "--data", envvar="GPUSTACK_CALIBRATION_DATA",
                                            help="Calibration folder (default ../shared/data/calibration)."),
                  out_path: Path = typer.Option(None, "--out", help="Preset file to write "
                                                "(default catalog/presets/calibration.yaml)."),
                  as_json: bool = JsonOpt) -> None:
    """Fit the parameters needing calibration to the calibration data and write the calibration preset."""
    from .calibrate import FIXED, PARAMETERS, RowModels, data_hash, errors, fit, read_rows

    folder = _calibration_dir(ctx, data)
    csv_path, hw_path = folder / "training_iterations.csv", folder / "hardware.yaml"
    for p in (csv_path, hw_path):
        if not p.is_file():
            raise UsageError(f"calibration data {p} not found", "pass --data DIR")
    engine = Engine(ctx, False)
    rows = read_rows(csv_path, [])
    result = fit(RowModels(engine.resolver, engine.scenarios, rows))
    measured = [r.measured for r in rows]
    stats = errors(result.predicted, measured)
    target = out_path or settings(ctx).catalog / "presets" / "calibration.yaml"
    digest = data_hash([csv_path, hw_path])
    text = calibration_yaml(result, stats, digest, len(rows), [csv_path.name, hw_path.name], PARAMETERS, FIXED)
    target.write_text(text, encoding="utf-8")
    table = [{"row": r.index, "run": r.label, "measured": m, "predicted": p, "error": (p - m) / m}
             for r, m, p in zip(rows, measured, result.predicted)]
    data_out = {"preset": str(target), "parameters": {k: {"value": v, "sd": result.sds[k]}
                                                      for k, v in result.values.items()},
                "rows": table, **stats, "data_sha256": digest, "iterations": result.iterations}
    lines = [f"{'row':>3}  {'run':<28}{'measured s':>12}{'predicted s':>13}{'error':>9}"]
    lines += [f"{t['row']:>3}  {t['run']:<28}{t['measured']:>12.4g}{t['predicted']:>13.4g}{100 * t['error']:>8.1f}%"
              for t in table]
    lines.append(f"in-sample: MAPE {100 * stats['mape']:.1f}%, max |error| {100 * stats['max_abs_error']:.1f}%, "
                 f"signed bias {100 * stats['bias']:+.1f}%")
    lines += [f"fitted {k} = {v:.4f} " + (f"± {result.sds[k]:.4f}" if result.sds[k] is not None
                                            else "(at its bound: not identified by the data)")
              for k, v in result.values.items()]
    lines.append(f"wrote {target} (data sha256 {digest[:12]})")
    out(data_out, "\n".join(lines), as_json)


def calibration_yaml(result, stats: dict, digest: str, n_rows: int, files: list[str], params, fixed) -> str:
    """The calibration preset, written by hand so the file is stable byte for byte."""
    lines = ["# yaml-language-server: $schema=../../schemas/presets.schema.json",
             "# Written by `gpustack calibrate`; do not edit by hand. Fitted only to the calibration data folder.",
             "presets:", "  - name: calibration",
             "    description: >-",
             "      Efficiency parameters fitted to the calibration data: measured seconds per iteration of",
             "      four GPT-style models on A100 (Korthikanti et al. 2022, Table 5), by damped Gauss-Newton",
             "      on log(predicted / measured). Roots in one group share one fitted value.",
             "    provenance: fitted",
             "    source: gpustack calibrate on shared/data/calibration (training_iterations.csv, hardware.yaml)",
             "    references: [korthikanti2022_recompute]",
             "    fit:",
             "      method: Levenberg-Marquardt on log residuals; sd from the residual variance and the Jacobian",
             f"      data: [{', '.join(files)}]",
             f"      data_sha256: {digest}",
             f"      rows: {n_rows}",
             f"      mape: {stats['mape']:.6g}",
             f"      max_abs_error: {stats['max_abs_error']:.6g}",
             f"      bias: {stats['bias']:.6g}",
             "    assignments:"]
    for p in params:
        for root in p.roots:
            sd = result.sds[p.key]
            spread = f", sd: {sd:.3g}" if sd is not None else ""
            note = f"fitted, group {p.key}" + ("" if sd is not None else "; stopped at its bound, not identified")
            lines.append(f"      {root}: {{value: {result.values[p.key]:.6g}{spread}, "
                         f"reference: korthikanti2022_recompute, note: \"{note}\"}}")
    for f in fixed:
        lines.append(f"      {f.root}: {{value: {f.value:g}, units: \"{f.units}\", reference: korthikanti2022_recompute, "
                     f"note: \"held fixed in the fit: {f.reason}\"}}")
    return "\n".join(lines) + "\n"


@app.command("validate")
def validate_cmd(ctx: typer.Context, runs_csv: Path = typer.Argument(..., help="CSV: calibration columns plus "
                                                                       "seconds_per_iteration or tflops_per_gpu."),
                 samples: int = typer.Option(2000, "--samples", min=2, help="Monte Carlo samples per row."),
                 seed: int = typer.Option(0, "--seed"),
                 as_json: bool = JsonOpt) -> None:
    """Predict measured runs with the calibrated model and score the predictions."""
    from .calibrate import errors, read_rows, spearman
    from .estimate import build_scenario, _intervals

    engine = Engine(ctx, False)
    rows = read_rows(runs_csv, ["calibration"])
    table = []
    for row in rows:
        scenario = build_scenario(engine.scenarios, row.run)
        try:
            res = engine.resolver.resolve(row.target, scenario)
        except ResolveError as exc:
            raise UsageError(f"{runs_csv}:{row.line} (row {row.index}): {exc.message}", exc.hint) from None
        if res.value is None:
            raise UsageError(f"{runs_csv}:{row.line} (row {row.index}): {row.target} still needs "
                             f"{', '.join(sorted(res.missing))}")
        dists = fitted_distributions(scenario)
        band = _intervals(engine.resolver, scenario, [row.target], dists, samples, seed).get(row.target) \
            if dists else None
        table.append({"row": row.index, "run": row.label, "target": row.target, "units": res.units,
                      "measured": row.measured, "predicted": res.value,
                      "error": (res.value - row.measured) / row.measured,
                      "p5": band[5] if band else None, "p95": band[95] if band else None})
    measured, predicted = [t["measured"] for t in table], [t["predicted"] for t in table]
    stats = errors(predicted, measured)
    covered = [t for t in table if t["p5"] is not None]
    coverage = (sum(t["p5"] <= t["measured"] <= t["p95"] for t in covered) / len(covered)) if covered else None
    summary = {**stats, "spearman": spearman(predicted, measured), "interval_coverage": coverage, "rows": table}
    lines = [f"{'row':>3}  {'run':<28}{'measured':>11}{'predicted':>11}{'error':>8}  p5..p95"]
    for t in table:
        band = f"{t['p5']:.4g}..{t['p95']:.4g}" if t["p5"] is not None else "-"
        lines.append(f"{t['row']:>3}  {t['run']:<28}{t['measured']:>11.4g}{t['predicted']:>11.4g}"
                     f"{100 * t['error']:>7.1f}%  {band}")
    lines.append(f"MAPE {100 * stats['mape']:.1f}%, max |error| {100 * stats['max_abs_error']:.1f}%, bias "
                 f"{100 * stats['bias']:+.1f}%, Spearman {summary['spearman']:.3f}, interval coverage "
                 + (f"{100 * coverage:.0f}%" if coverage is not None else "n/a"))
    out(summary, "\n".join(lines), as_json)


@app.command("sweep")
def sweep_cmd(ctx: typer.Context, run_file: Path = typer.Argument(..., help="Run file; the grid replaces its layout."),
              grid: list[str] = typer.Option([], "--grid", help="AXIS=V1,V2,... (tp, pp, dp, cp, micro_batch, "
                                             "interleave, zero_stage, recompute, sequence_parallel)."),
              objective: str = typer.Option("tokens_per_sec", "--objective",
                                            help="tokens_per_sec, cost_per_token, energy_per_token or step_time."),
              top: int = typer.Option(10, "--top", min=1, help="Valid layouts to show."),
              set_: list[str] = typer.Option([], "--set", help="Override a run-file field."),
              as_json: bool = JsonOpt) -> None:
    """Evaluate every layout on a grid; rank the valid ones, count the invalid ones by reason."""
    from .sweep import AXES, parse_grid, sweep

    if not grid:
        raise UsageError("--grid is required, e.g. --grid tp=1,2,4,8 --grid pp=1,2,4,8")
    run = load_run(run_file, set_)
    engine = Engine(ctx, False)
    result = sweep(engine.resolver, engine.scenarios, run, parse_grid(grid), objective, top)
    lines = [f"{result.evaluated} layouts evaluated in {result.seconds:.2f} s: {result.valid} valid"]
    for reason, count in sorted(result.rejected.items(), key=lambda kv: -kv[1]):
        lines.append(f"  rejected {count:>8}  {reason}")
    if result.top:
        cols = list(AXES)
        lines.append("  " + " ".join(f"{c:>10}" for c in cols) + f"  {objective:>16}  mem/GPU GB")
        for row in result.top:
            lines.append("  " + " ".join(f"{row[c]!s:>10}" for c in cols)
                         + f"  {row[objective]:>16.6g}  {row['memory_per_gpu_GB']:>9.1f}")
    out(result.as_dict(), "\n".join(lines), as_json)
