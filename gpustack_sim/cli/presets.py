"""`gpustack presets` and `gpustack scenario`: the shipped scenarios and what they resolve to."""

from __future__ import annotations

import typer

from .app import JsonOpt, Neo4jOpt, app, engine, out, pairs
from .render import fmt

presets_app = typer.Typer(no_args_is_help=True, help="Named scenarios shipped in catalog/presets.")
scenario_app = typer.Typer(no_args_is_help=True, help="Resolve a preset's advertised targets and report.")
app.add_typer(presets_app, name="presets")
app.add_typer(scenario_app, name="scenario")


@presets_app.command("list")
def presets_list(ctx: typer.Context, as_json: bool = JsonOpt, neo4j: bool = Neo4jOpt) -> None:
    """Every preset with its provenance, size and advertised targets."""
    rows = [{"name": n, "provenance": p["provenance"], "assignments": len(p["assignments"]),
             "variants": p["variants"], "targets": p["targets"], "description": p["description"]}
            for n, p in sorted(engine(ctx, neo4j).tables.presets.items())]
    lines = [f"{'preset':<36}{'provenance':<20}{'values':>7}  targets"]
    lines += [f"{r['name']:<36}{r['provenance']:<20}{r['assignments']:>7}  {', '.join(r['targets'].values())}"
              for r in rows]
    out(rows, "\n".join(lines), as_json)


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
    rep = engine(ctx, neo4j).scenario_report(preset, pairs(target, "--target", "LABEL=VARIABLE"))
    out(rep, "\n".join(report_lines(rep)), as_json)
    if fail_on_issues and rep["status"] != "ok":
        raise typer.Exit(1)


@scenario_app.command("audit")
def scenario_audit(ctx: typer.Context, as_json: bool = JsonOpt, neo4j: bool = Neo4jOpt) -> None:
    """Every sourced preset against the targets it advertises; exit 1 if any is not ok."""
    eng = engine(ctx, neo4j)
    sourced = [n for n, p in sorted(eng.tables.presets.items()) if p["provenance"] == "sourced"]
    reports = [eng.scenario_report(name) for name in sourced]
    lines = []
    for rep in reports:
        lines.extend(report_lines(rep))
    bad = [r["preset"] for r in reports if r["status"] != "ok"]
    lines.append(f"{len(reports)} sourced preset(s), {len(reports) - len(bad)} ok" +
                 (f"; not ok: {', '.join(bad)}" if bad else ""))
    out({"presets": reports, "not_ok": bad}, "\n".join(lines), as_json)
    if bad:
        raise typer.Exit(1)
