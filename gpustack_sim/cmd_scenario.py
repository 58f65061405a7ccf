"""`gpustack presets` and `gpustack scenario`: the shipped scenarios and what they resolve to."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from gpustack_compiler.cli import JsonOpt, Neo4jOpt, app, compile_or_fail, out, settings
from gpustack_compiler.errors import UsageError
from gpustack_compiler.suggest import did_you_mean

from .display import fmt

if TYPE_CHECKING:
    from .engine import Engine

presets_app = typer.Typer(no_args_is_help=True, help="Named scenarios shipped in catalog/presets.")
scenario_app = typer.Typer(no_args_is_help=True, help="Resolve a preset's advertised targets and report.")
app.add_typer(presets_app, name="presets")
app.add_typer(scenario_app, name="scenario")


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
    from .resolver import ResolveError

    scenario = engine.scenarios.build([preset], [], [])
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
    from .engine import Engine

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
    from .engine import Engine

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
