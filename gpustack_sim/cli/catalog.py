"""`gpustack check`, `compile`, `schema` and `stats`: the catalog itself."""

from __future__ import annotations

import sys

import typer

from gpustack_compiler.base.errors import InputError
from gpustack_compiler.build import pipeline

from .app import JsonOpt, Neo4jOpt, app, catalog_dir, out, settings, source


@app.command()
def check(ctx: typer.Context,
          format: str = typer.Option("text", "--format", help="text, json or github (annotations)."),
          strict: bool = typer.Option(False, "--strict", help="Warnings fail too."),
          as_json: bool = JsonOpt) -> None:
    """Validate the catalog: syntax, schema, names, units, references, expressions, dimensions, graph."""
    s = settings(ctx)
    if format not in ("text", "json", "github"):
        raise InputError(f"--format must be text, json or github, not {format!r}")
    result = pipeline.run(catalog_dir(ctx), s.build, write_manifest=False, need_manifest=False)
    from ..experiments.catalog_check import protocol_findings  # the preregistered protocols beside the catalog

    result.findings.extend(protocol_findings(s.catalog, s.build, result))
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
                                        "did not create (they are deleted), and rewrite every node and "
                                        "relationship, unchanged ones too (undoes edits made by hand).")) -> None:
    """Check the catalog and write build/manifest.json (the embedded default; no server needed)."""
    from ..compiled import compile_catalog
    from .neo4j import load_manifest, reject_stray_options

    reject_stray_options(neo4j, uri, user, password, database, force)
    s = settings(ctx)
    result = compile_catalog(s.catalog, s.build, write=True)
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
    from gpustack_compiler.build import schema as schema_mod

    # The engine's document models register their schema files when imported.
    from ..datacenter import sites  # noqa: F401
    from ..engine import observation, run, serve_run  # noqa: F401
    from ..experiments import protocol, results  # noqa: F401
    from ..learning import config  # noqa: F401

    catalog_dir(ctx)  # the schemas sit beside it
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


@app.command()
def stats(ctx: typer.Context, as_json: bool = JsonOpt, neo4j: bool = Neo4jOpt) -> None:
    """Counts, coverage and connectedness of the catalog."""
    st = source(ctx, neo4j).stats()
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
