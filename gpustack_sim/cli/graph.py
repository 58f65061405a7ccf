"""`gpustack show`, `cone` and `root-debt`: reading the compiled graph (manifest or Neo4j)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import typer

from gpustack_compiler.base.errors import InputError
from gpustack_compiler.base.suggest import did_you_mean

from .app import JsonOpt, Neo4jOpt, app, out, source

if TYPE_CHECKING:
    from gpustack_compiler.manifest.records import VariableRecord
    from gpustack_compiler.manifest.source import GraphSource


def require(src: GraphSource, name: str, kinds: tuple[str, ...] = ("variable", "constant")) -> None:
    found = any(getattr(src, k)(name) is not None for k in kinds)
    if not found:
        hint = did_you_mean(name, src.names())
        raise InputError(f"unknown name `{name}`", hint)


@app.command()
def show(ctx: typer.Context, name: str, as_json: bool = JsonOpt, neo4j: bool = Neo4jOpt) -> None:
    """Units, description, references, defining relations and users of a name."""
    src = source(ctx, neo4j)
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
        out(c.to_dict(), f"{name} = {c.value:g} {c.units}{' (exact)' if c.exact else ''}\n  {c.description}\n"
                        f"  references: {', '.join(c.references)}", as_json)
        return
    v = src.variable(name)
    sub = src.subgraph(name)
    defs = [r for r in sub["relations"].values() if r.get("defines") == name]
    users = sorted(src.cone(name, upstream=False, depth=1))
    constraints = [r for r in sub["relations"].values() if r["kind"] == "constraint" and name in r["constrains"]]
    data = {**v.to_dict(), "defined_by": [r["name"] for r in defs], "used_by": users,
            "constraints": [r["name"] for r in constraints]}
    lines = [f"{name}  [{v.units}]  ({v.system})", f"  {v.description}"]
    if v.assumptions:
        lines.append(f"  assumptions: {', '.join(v.assumptions)}")
    if v.bounds:
        lines.append(f"  bounds: {data['bounds']}")
    if v.root:
        lines.append(f"  root input: {v.root.category} (family {v.root.family})")
    for r in defs:
        tag = f" [{r['kind']}{' ' + r['variant'] if r.get('variant') else ''}]"
        lines.append(f"  = {r['canonical']}    ({r['name']}{tag})")
    if users:
        lines.append(f"  used by: {', '.join(users)}")
    if constraints:
        lines.append("  constraints: " + "; ".join(f"{r['canonical']} ({r['name']})" for r in constraints))
    lines.append(f"  references: {', '.join(v.references)}")
    lines.append(f"  at {v.file}:{v.line}")
    out(data, "\n".join(lines), as_json)


SELECTOR = re.compile(r"^(?:(?P<up>\d*)\+)?(?P<name>[a-z][a-z0-9_.]*[a-z0-9_])(?:\+(?P<down>\d*))?$")


def parse_selector(text: str) -> tuple[str, bool | None, int | None]:
    """`+x` upstream, `x+` downstream, `2+x` / `x+2` depth-limited; plain `x` says no direction."""
    match = SELECTOR.match(text)
    if not match:
        raise InputError(f"cannot read selector {text!r}", "use NAME, +NAME, NAME+, 2+NAME or NAME+2")
    up, name, down = match.group("up"), match.group("name"), match.group("down")
    if up is not None and down is not None:
        raise InputError("a selector goes one way: +NAME (upstream) or NAME+ (downstream)")
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
        raise InputError(f"--format must be text, json or dot, not {format!r}")
    direction = upstream if upstream is not None else (sel_up if sel_up is not None else True)
    depth = depth or sel_depth
    src = source(ctx, neo4j)
    require(src, name)
    found = src.cone(name, upstream=direction, depth=depth)
    variables = src.variables([name, *found])  # one lookup: a cone holds hundreds of names
    rows = []
    for n, d in sorted(found.items(), key=lambda kv: (kv[1], kv[0])):
        v = variables.get(n)
        c = src.constant(n) if v is None else None
        rows.append({"name": n, "depth": d, "units": (v or c).units,
                     "kind": "constant" if c else ("root" if v.is_root else "variable")})
    data = {"name": name, "direction": "upstream" if direction else "downstream", "depth": depth,
            "count": len(rows), "nodes": rows}
    if as_json or format == "json":
        out(data, "", True)
        return
    if format == "dot":
        out(data, _dot(src, name, found, variables), False)
        return
    lines = [f"{data['direction']} cone of {name}: {len(rows)} names"]
    for r in rows:
        mark = {"root": " (root)", "constant": " (constant)"}.get(r["kind"], "")
        lines.append(f"  {'  ' * (r['depth'] - 1)}{r['depth']} {r['name']} [{r['units']}]{mark}")
    out(data, "\n".join(lines), False)


def _dot(src: GraphSource, name: str, found: dict[str, int], variables: dict[str, VariableRecord]) -> str:
    members = set(found) | {name}
    lines = ["digraph cone {", "  rankdir=LR;", '  node [shape=box, fontname="Helvetica"];']
    for n in sorted(members):
        v = variables.get(n)
        lines.append(f'  "{n}"' + (' [style=filled, fillcolor="#fde9c8"]' if v and v.is_root else "") + ";")
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
    src = source(ctx, neo4j)
    systems = src.stats()["by_system"]
    if system is not None and system not in systems:
        raise InputError(f"unknown system `{system}`", did_you_mean(system, systems))
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
