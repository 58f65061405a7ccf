"""The compiler's commands: check, compile, schema, stats, show, cone, root-debt.

JSON alone goes to stdout with `--json`; messages and errors go to stderr. Exceptions become exit
codes in `gpustack_sim.cli.main`, the one place that maps them.
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import typer

from typing import TYPE_CHECKING

from . import pipeline
from .errors import FindingsError, UsageError
from .suggest import did_you_mean

if TYPE_CHECKING:
    from .source import GraphSource, ManifestSource

app = typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_show_locals=False,
                  help="gpustack: what a token of AI training physically costs, and what that number is made of.")

JsonOpt = typer.Option(False, "--json", help="Print JSON alone on stdout.")


@dataclass
class Settings:
    catalog: Path
    build: Path
    schemas: Path


def _default_catalog() -> Path:
    here = Path("catalog")
    if here.is_dir():
        return here
    return Path(__file__).resolve().parent.parent / "catalog"


@app.callback()
def _settings(ctx: typer.Context,
              catalog: Path = typer.Option(None, "--catalog", envvar="GPUSTACK_CATALOG",
                                           help="Catalog directory (default: ./catalog)."),
              build_dir: Path = typer.Option(Path("build"), "--build-dir", envvar="GPUSTACK_BUILD_DIR",
                                             help="Where the manifest and caches go.")) -> None:
    cat = catalog or _default_catalog()
    ctx.obj = Settings(cat, build_dir, cat.resolve().parent / "schemas")


def settings(ctx: typer.Context) -> Settings:
    return ctx.find_root().obj


def out(data, text: str, as_json: bool) -> None:
    if as_json:
        sys.stdout.write(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")
    else:
        sys.stdout.write(text + ("\n" if text and not text.endswith("\n") else ""))


def err(text: str) -> None:
    sys.stderr.write(text + "\n")


def compile_or_fail(s: Settings, write: bool = False) -> pipeline.Result:
    if not s.catalog.is_dir():
        raise UsageError(f"catalog directory {s.catalog} not found", "pass --catalog PATH")
    result = pipeline.run(s.catalog, s.build, write_manifest=write)
    if result.manifest is None:
        errors = sorted(result.findings.errors)
        for f in errors[:20]:
            err(f.as_text())
        more = len(errors) - 20
        raise FindingsError(f"the catalog has {len(errors)} error(s)"
                            + (f" ({more} more not shown)" if more > 0 else ""),
                            "run `gpustack check` for every finding")
    return result


def manifest_source(ctx: typer.Context) -> ManifestSource:
    from .source import ManifestSource

    return ManifestSource(compile_or_fail(settings(ctx)).manifest)


def require(source: GraphSource, name: str, kinds: tuple[str, ...] = ("variable", "constant")) -> None:
    found = any(getattr(source, k)(name) is not None for k in kinds)
    if not found:
        hint = did_you_mean(name, source.names())
        raise UsageError(f"unknown name `{name}`", hint)


# ---- check / compile / schema ---------------------------------------------------------------

@app.command()
def check(ctx: typer.Context,
          format: str = typer.Option("text", "--format", help="text, json or github (annotations)."),
          strict: bool = typer.Option(False, "--strict", help="Warnings fail too."),
          as_json: bool = JsonOpt) -> None:
    """Validate the catalog: syntax, schema, names, units, references, expressions, dimensions, graph."""
    s = settings(ctx)
    if format not in ("text", "json", "github"):
        raise UsageError(f"--format must be text, json or github, not {format!r}")
    if not s.catalog.is_dir():
        raise UsageError(f"catalog directory {s.catalog} not found", "pass --catalog PATH")
    result = pipeline.run(s.catalog, s.build, write_manifest=False, need_manifest=False)
    fmt = "json" if as_json else format
    text = result.findings.render(fmt)
    if text:
        sys.stdout.write(text + "\n")
    code = result.findings.exit_code(strict)
    if code:
        raise typer.Exit(code)


@app.command("compile")
def compile_(ctx: typer.Context, as_json: bool = JsonOpt,
             neo4j: bool = typer.Option(False, "--neo4j", help="Also load the graph into Neo4j, replacing the "
                                        "previous one as a unit (NEO4J_URI etc., or the options below)."),
             uri: str = typer.Option(None, "--uri", help="Neo4j URI (default $NEO4J_URI, else bolt://127.0.0.1:7687)."),
             user: str = typer.Option(None, "--user", help="Neo4j user (default $NEO4J_USER, else neo4j)."),
             password: str = typer.Option(None, "--password", help="Neo4j password (default $NEO4J_PASSWORD; "
                                          "none: no authentication)."),
             database: str = typer.Option(None, "--database", help="Neo4j database (default $NEO4J_DATABASE, "
                                          "else the server's default)."),
             force: bool = typer.Option(False, "--force", help="Load even into a database holding nodes gpustack "
                                        "did not create (they are deleted).")) -> None:
    """Check the catalog and write build/manifest.json (the embedded default; no server needed)."""
    from .neo4j_cli import load_manifest, reject_stray_options

    reject_stray_options(neo4j, uri, user, password, database, force)
    s = settings(ctx)
    result = compile_or_fail(s, write=True)
    path = s.build / "manifest.json"
    st = result.manifest["stats"]
    data = {"manifest": str(path), "catalog_hash": result.catalog_hash, "cached": result.cached,
            "variables": st["variables"], "relations": st["relations"], "warnings": len(result.findings.warnings)}
    text = (f"wrote {path} ({st['variables']} variables, {st['relations']} relations, "
            f"{len(result.findings.warnings)} warnings; catalog {result.catalog_hash[:12]})")
    if neo4j:
        data["neo4j"], loaded = load_manifest(result.manifest, path, s.catalog, uri, user, password, database,
                                              bool(force))
        text += "\n" + loaded
    out(data, text, as_json)


@app.command()
def schema(ctx: typer.Context,
           check_only: bool = typer.Option(False, "--check", help="Exit 1 if the committed schemas are stale."),
           as_json: bool = JsonOpt) -> None:
    """Regenerate the JSON Schema files in schemas/ from the models."""
    from . import schema as schema_mod

    directory = settings(ctx).schemas
    if check_only:
        stale = schema_mod.stale(directory)
        out({"stale": stale}, "\n".join(f"stale: {directory / n}" for n in stale) or "schemas are up to date",
            as_json)
        if stale:
            raise typer.Exit(1)
        return
    changed = schema_mod.write(directory)
    out({"written": changed}, "\n".join(f"wrote {directory / n}" for n in changed) or "schemas are up to date",
        as_json)


# ---- reading the graph ----------------------------------------------------------------------

def _source(ctx: typer.Context, use_neo4j: bool) -> GraphSource:
    if use_neo4j:
        from .neo4j_source import Neo4jSource

        return Neo4jSource.from_env()
    return manifest_source(ctx)


Neo4jOpt = typer.Option(False, "--neo4j", help="Answer from Neo4j (NEO4J_URI etc.) instead of the manifest.")


@app.command()
def stats(ctx: typer.Context, as_json: bool = JsonOpt, neo4j: bool = Neo4jOpt) -> None:
    """Counts, coverage and connectedness of the catalog."""
    st = _source(ctx, neo4j).stats()
    lines = [
        f"systems            {st['systems']}",
        f"variables          {st['variables']}",
        f"constants          {st['constants']}",
        f"relations          {st['relations']}  "
        + ", ".join(f"{k} {v}" for k, v in st["relations_by_kind"].items() if v),
        f"root inputs        {st['root_inputs']}",
        f"leaves             {st['leaves']}",
        f"cycles             {st['cycles']}",
        f"topological order  {st['topological_order_length']}",
        f"references         {st['references']}",
        f"presets            {st['presets']}",
        "coverage           " + ", ".join(f"{k} {_pct(v)}" for k, v in st["coverage"].items()),
        f"headline cone      {st['headline_cone']['variables']} variables, {st['headline_cone']['relations']} "
        f"relations ({_pct(st['headline_cone']['relation_share'])} of relations)",
        "",
        f"{'system':<18}{'vars':>6}{'rels':>6}{'roots':>7}{'lit':>7}{'lit+ds':>8}{'in cone':>9}  feeds headline",
    ]
    for name, row in st["by_system"].items():
        lines.append(f"{name:<18}{row['variables']:>6}{row['relations']:>6}{row['roots']:>7}"
                     f"{_pct(row['literature_share']):>7}{_pct(row['literature_or_datasheet_share']):>8}"
                     f"{_pct(row['headline_cone_share']):>9}  {'yes' if row['feeds_headline'] else 'no'}")
    out(st, "\n".join(lines), as_json)


def _pct(v) -> str:
    return "-" if v is None else f"{100 * v:.0f}%"


@app.command()
def show(ctx: typer.Context, name: str, as_json: bool = JsonOpt, neo4j: bool = Neo4jOpt) -> None:
    """Units, description, references, defining relations and users of a name."""
    src = _source(ctx, neo4j)
    require(src, name, ("variable", "constant", "relation"))
    if src.relation(name) is not None:
        rel = src.relation(name)
        lines = [f"{name}  [{rel['kind']}{' ' + rel['variant'] if rel.get('variant') else ''}]",
                 f"  {rel['description']}"]
        if rel.get("defines"):
            lines.append(f"  {rel['defines']} = {rel['canonical']}")
        else:
            lines.append(f"  {rel['canonical']}")
        for label, text in rel["parts"].items():
            lines.append(f"  {label}: {text}")
        lines.append(f"  inputs: {', '.join(rel['inputs'])}")
        lines.append(f"  references: {', '.join(rel['references'])}")
        lines.append(f"  at {rel['file']}:{rel['line']}")
        out(rel, "\n".join(lines), as_json)
        return
    if src.constant(name) is not None:
        c = src.constant(name)
        out(c, f"{name} = {c['value']:g} {c['units']}{' (exact)' if c['exact'] else ''}\n  {c['description']}\n"
               f"  references: {', '.join(c['references'])}", as_json)
        return
    v = src.variable(name)
    sub = src.subgraph(name)
    defs = [r for r in sub["relations"].values() if r.get("defines") == name]
    users = sorted(src.cone(name, upstream=False, depth=1))
    constraints = [r for r in sub["relations"].values() if r["kind"] == "constraint" and name in r["constrains"]]
    data = {**v, "defined_by": [r["name"] for r in defs], "used_by": users,
            "constraints": [r["name"] for r in constraints]}
    lines = [f"{name}  [{v['units']}]  ({v['system']})", f"  {v['description']}"]
    if v.get("assumptions"):
        lines.append(f"  assumptions: {', '.join(v['assumptions'])}")
    if v.get("bounds"):
        lines.append(f"  bounds: {v['bounds']}")
    if v.get("root"):
        lines.append(f"  root input: {v['root']['category']} (family {v['root']['family']})")
    for r in defs:
        tag = f" [{r['kind']}{' ' + r['variant'] if r.get('variant') else ''}]"
        lines.append(f"  = {r['canonical']}    ({r['name']}{tag})")
    if users:
        lines.append(f"  used by: {', '.join(users)}")
    if constraints:
        lines.append("  constraints: " + "; ".join(f"{r['canonical']} ({r['name']})" for r in constraints))
    lines.append(f"  references: {', '.join(v['references'])}")
    lines.append(f"  at {v['file']}:{v['line']}")
    out(data, "\n".join(lines), as_json)


SELECTOR = re.compile(r"^(?:(?P<up>\d*)\+)?(?P<name>[a-z][a-z0-9_.]*[a-z0-9_])(?:\+(?P<down>\d*))?$")


def parse_selector(text: str) -> tuple[str, bool | None, int | None]:
    """`+x` upstream, `x+` downstream, `2+x` / `x+2` depth-limited; plain `x` says no direction."""
    match = SELECTOR.match(text)
    if not match:
        raise UsageError(f"cannot read selector {text!r}", "use NAME, +NAME, NAME+, 2+NAME or NAME+2")
    up, name, down = match.group("up"), match.group("name"), match.group("down")
    if up is not None and down is not None:
        raise UsageError("a selector goes one way: +NAME (upstream) or NAME+ (downstream)")
    if up is not None:
        return name, True, int(up) if up else None
    if down is not None:
        return name, False, int(down) if down else None
    return name, None, None


@app.command()
def cone(ctx: typer.Context, selector: str = typer.Argument(..., help="NAME, +NAME, NAME+, 2+NAME, NAME+2"),
         upstream: bool = typer.Option(None, "--upstream/--downstream", help="Direction (default upstream)."),
         depth: int = typer.Option(None, "--depth", min=1, help="Relations to cross at most."),
         format: str = typer.Option("text", "--format", help="text, json or dot."),
         as_json: bool = JsonOpt, neo4j: bool = Neo4jOpt) -> None:
    """Everything a variable depends on (upstream) or that depends on it (downstream)."""
    name, sel_up, sel_depth = parse_selector(selector)
    if format not in ("text", "json", "dot"):
        raise UsageError(f"--format must be text, json or dot, not {format!r}")
    direction = upstream if upstream is not None else (sel_up if sel_up is not None else True)
    depth = depth or sel_depth
    src = _source(ctx, neo4j)
    require(src, name)
    found = src.cone(name, upstream=direction, depth=depth)
    rows = []
    for n, d in sorted(found.items(), key=lambda kv: (kv[1], kv[0])):
        v = src.variable(n)
        c = src.constant(n) if v is None else None
        rows.append({"name": n, "depth": d, "units": (v or c)["units"],
                     "kind": "constant" if c else ("root" if v["is_root"] else "variable")})
    data = {"name": name, "direction": "upstream" if direction else "downstream", "depth": depth,
            "count": len(rows), "nodes": rows}
    if as_json or format == "json":
        out(data, "", True)
        return
    if format == "dot":
        out(data, _dot(src, name, found), False)
        return
    lines = [f"{data['direction']} cone of {name}: {len(rows)} names"]
    for r in rows:
        mark = {"root": " (root)", "constant": " (constant)"}.get(r["kind"], "")
        lines.append(f"  {'  ' * (r['depth'] - 1)}{r['depth']} {r['name']} [{r['units']}]{mark}")
    out(data, "\n".join(lines), False)


def _dot(src: GraphSource, name: str, found: dict[str, int]) -> str:
    members = set(found) | {name}
    lines = ["digraph cone {", "  rankdir=LR;", '  node [shape=box, fontname="Helvetica"];']
    for n in sorted(members):
        v = src.variable(n)
        lines.append(f'  "{n}"' + (' [style=filled, fillcolor="#fde9c8"]' if v and v["is_root"] else "") + ";")
    for r in src.relations_defining(sorted(members)):
        for i in r["inputs"]:
            if i in members:
                lines.append(f'  "{i}" -> "{r["defines"]}" [label="{r["name"]}"];')
    lines.append("}")
    return "\n".join(lines)


@app.command("root-debt")
def root_debt(ctx: typer.Context,
              families: bool = typer.Option(False, "--families", help="Rank families (union of cones)."),
              system: str = typer.Option(None, "--system", help="Only roots of this system."),
              limit: int = typer.Option(20, "--limit", min=1, help="Rows to show."),
              as_json: bool = JsonOpt, neo4j: bool = Neo4jOpt) -> None:
    """Unresolved inputs ranked by downstream blast radius (distinct variables they move)."""
    src = _source(ctx, neo4j)
    systems = src.stats()["by_system"]
    if system is not None and system not in systems:
        raise UsageError(f"unknown system `{system}`", did_you_mean(system, systems))
    if families:
        rows = src.family_debt(system)
        data = [{"family": f.family, "weight": f.weight, "roots": f.roots, "heaviest": list(f.heaviest)}
                for f in rows]
        lines = [f"{'weight':>7}  {'roots':>5}  family (heaviest roots)"]
        lines += [f"{f.weight:>7}  {f.roots:>5}  {f.family} ({', '.join(f.heaviest)})" for f in rows[:limit]]
    else:
        rows = src.root_debt(system)
        data = [{"name": r.name, "weight": r.weight, "family": r.family, "category": r.category} for r in rows]
        lines = [f"{'weight':>7}  root  [category, family]"]
        lines += [f"{r.weight:>7}  {r.name}  [{r.category}, {r.family}]" for r in rows[:limit]]
    out(data[:limit], "\n".join(lines), as_json)


# ---- the local Neo4j server (gpustack_compiler/neo4j_cli.py) ---------------------------------

from .neo4j_cli import neo4j_app  # noqa: E402  (mounted last: it needs nothing from this module)

app.add_typer(neo4j_app, name="neo4j")
