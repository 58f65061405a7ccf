"""Builds the manifest from a checked catalog: records, edges, sympy canonical forms and LaTeX."""

from __future__ import annotations

import sympy

from gpustack_compiler.base.forked import can_fork, fork_map
from gpustack_compiler.language.expressions import ExprError
from gpustack_compiler.language.kinds import CONSTRAINT, KEYED, kind_of
from gpustack_compiler.language.symbolic import SymbolicCache, SymbolTable
from gpustack_compiler.manifest.graph import CatalogGraph, RelationEdges
from gpustack_compiler.manifest.serialise import SCHEMA_VERSION

from .bindings import binding_tables
from .catalog import Catalog, RelEntry


class RelationBuildError(Exception):
    """sympy refused a relation that passed the checks; reported as a finding at the relation."""

    def __init__(self, rel: RelEntry, exc: ExprError):
        super().__init__(exc.message)
        self.rel = rel
        self.exc = exc


def relation_edges(cat: Catalog) -> list[RelationEdges]:
    return [RelationEdges(name, r.kind, r.inputs, r.output) for name, r in sorted(cat.relations.items())]


def symbol_table(cat: Catalog) -> SymbolTable:
    assumptions = {n: tuple(sorted(e.spec.assumptions)) for n, e in cat.variables.items()}
    for n, c in cat.constants.items():
        assumptions[n] = ("positive",) if c.spec.value > 0 else ("real",)
    latex = {n: e.spec.symbol for n, e in {**cat.variables, **cat.constants}.items() if e.spec.symbol}
    return SymbolTable(assumptions, latex, lambda u: cat.units.parse(u).scale)


def _symbolic_forms(rel: RelEntry, table: SymbolTable) -> tuple[str, str]:
    expr = rel.rules.canonical(rel.spec, lambda label: table.builder.build(rel.parts[label]), table.symbol)
    return sympy.sstr(expr, order="lex"), table.latex(expr)


def _cache_key(name: str, rel: RelEntry, table: SymbolTable) -> str:
    return table.key(name + "\0" + rel.spec.kind, [rel.parts[k] for k in sorted(rel.parts)])


PARALLEL_THRESHOLD = 1000


def _forms_or_error(rel: RelEntry, table: SymbolTable):
    try:
        return _symbolic_forms(rel, table)
    except ExprError as exc:
        return exc


def _prefill(cat: Catalog, table: SymbolTable, cache: SymbolicCache) -> None:
    """Build the uncached sympy forms on every core: a cold compile of a large catalog is mostly this.
    Workers are forked, so they share the symbol table without pickling it; output is identical."""
    todo = [(key, rel) for name, rel in sorted(cat.relations.items())
            if (key := _cache_key(name, rel, table)) not in cache.data]
    if len(todo) < PARALLEL_THRESHOLD or not can_fork():
        return
    results = fork_map(lambda rel: _forms_or_error(rel, table), [rel for _, rel in todo], chunksize=100)
    for (key, rel), result in zip(todo, results):
        if isinstance(result, ExprError):
            raise RelationBuildError(rel, result)
        cache.data[key] = list(result)
        cache.dirty = True


def _relation_record(name: str, rel: RelEntry, table: SymbolTable, cache: SymbolicCache, used: set[str]) -> dict:
    spec = rel.spec
    key = _cache_key(name, rel, table)
    used.add(key)
    try:
        canonical, latex = cache.get_or_make(key, lambda: _symbolic_forms(rel, table))
    except ExprError as exc:
        raise RelationBuildError(rel, exc) from None
    record = {
        "name": name,
        "kind": spec.kind,
        "system": rel.system,
        "defines": rel.output,
        "inputs": list(rel.inputs),
        "parts": {label: p.text for label, p in sorted(rel.parts.items())},
        "canonical": canonical,
        "latex": latex,
        "description": spec.description,
        "references": list(spec.references),
        "dimension_checked": rel.dim_checked,
        "file": rel.loc.file,
        "line": rel.loc.line,
    }
    return {**record, **rel.rules.record(spec, rel.inputs)}


def build_manifest(cat: Catalog, graph: CatalogGraph, catalog_hash: str, cache: SymbolicCache) -> dict:
    units = cat.units
    table = symbol_table(cat)
    used: set[str] = set()
    roots = set(graph.roots)
    leaves = set(graph.leaves)
    variables = {}
    for name, e in sorted(cat.variables.items()):
        s = e.spec
        variables[name] = {
            "name": name,
            "system": e.system,
            "units": s.units,
            "scale": e.unit.scale,
            "dimension": units.dim_as_dict(e.unit.dim),
            "description": s.description,
            "symbol": s.symbol,
            "quantity": s.quantity,
            "assumptions": sorted(s.assumptions),
            "bounds": s.bounds.model_dump() if s.bounds else None,
            "references": list(s.references),
            "root": s.root.model_dump() if (s.root and name in roots) else None,
            "is_root": name in roots,
            "is_leaf": name in leaves,
            "file": e.loc.file,
            "line": e.loc.line,
        }
    constants = {}
    for name, c in sorted(cat.constants.items()):
        s = c.spec
        constants[name] = {
            "name": name, "value": s.value, "units": s.units, "scale": c.unit.scale,
            "si_value": s.value * c.unit.scale, "dimension": units.dim_as_dict(c.unit.dim),
            "description": s.description, "symbol": s.symbol, "exact": s.exact,
            "references": list(s.references), "file": c.loc.file, "line": c.loc.line,
        }
    _prefill(cat, table, cache)
    relations = {name: _relation_record(name, r, table, cache, used) for name, r in sorted(cat.relations.items())}
    cache.save(used)
    edges = []
    for name, r in sorted(relations.items()):
        if kind_of(r).role == CONSTRAINT:
            edges.extend({"source": name, "target": v, "type": "CONSTRAINS"} for v in r["constrains"])
            continue
        edges.extend({"source": v, "target": name, "type": "FEEDS"} for v in r["inputs"])
        edges.append({"source": name, "target": r["defines"], "type": "DEFINES"})
    references = {k: {**ref.model_dump(), "file": loc.file, "line": loc.line}
                  for k, (ref, loc) in sorted(cat.references.items())}
    presets = {name: {**p.spec.model_dump(mode="json", exclude_none=True), "file": p.loc.file, "line": p.loc.line}
               for name, p in sorted(cat.presets.items())}
    manifest = {
        "schema_version": SCHEMA_VERSION,
        "catalog_hash": catalog_hash,
        "units": {
            "base_dimensions": [{"name": n, "unit": u} for n, u in zip(units.dimension_names, units.base_symbols)],
            "units": {sym: {"scale": u.scale, "dimension": units.dim_as_dict(u.dim)}
                      for sym, u in sorted(units.units.items())},
            "ambiguous": dict(sorted(units.ambiguous.items())),
        },
        "systems": {n: s.model_dump() for n, s in sorted(cat.systems.items())},
        "headline_targets": list(cat.headline_targets),
        "variables": variables,
        "constants": constants,
        "relations": relations,
        "edges": edges,
        "references": references,
        "presets": presets,
        "variant_keys": sorted({r["variant"] for r in relations.values() if kind_of(r).role == KEYED}),
        "bindings": binding_tables(cat),
    }
    from gpustack_compiler.manifest.stats import compute_stats  # stats reads the manifest it is part of

    manifest["stats"] = compute_stats(manifest, graph)
    return manifest
