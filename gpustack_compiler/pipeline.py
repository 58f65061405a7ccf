"""check and compile: load, validate, graph checks, manifest. The whole result is cached by the
catalog's content hash, so a second run on an unchanged catalog only hashes files."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from . import manifest as mf
from .catalog import Catalog, content_hash, load_catalog
from .findings import Finding, Findings, Level
from .graph import CatalogGraph
from .symbolic import SymbolicCache

GENERATOR = "gpustack-compiler 0.1.0"
EXACT_KINDS = {"identity", "piecewise", "iterative", "differential", "stochastic"}


@dataclass
class Result:
    findings: Findings
    manifest: dict | None
    catalog_hash: str
    cached: bool = False


def graph_of(cat: Catalog) -> CatalogGraph:
    return CatalogGraph(cat.variables, cat.constants, mf.relation_edges(cat))


def check_graph(cat: Catalog, graph: CatalogGraph) -> None:
    f = cat.findings
    for cycle in graph.cycles():
        # `cycle` alternates variable, relation, variable, ...; it is reported at its first relation.
        loc = cat.relations[cycle[1]].loc
        f.add(loc.file, loc.line, "graph.cycle", "cycle: " + " --> ".join(cycle[::2]),
              context="via " + ", ".join(cycle[1::2]))
    defs: dict[str, list] = {}
    for rel in cat.relations.values():
        if rel.output is not None:
            defs.setdefault(rel.output, []).append(rel)
    for var, rels in sorted(defs.items()):
        exact = [r for r in rels if r.kind in EXACT_KINDS]
        variants = [r for r in rels if r.kind == "variant"]
        # Reported at every relation involved, so an annotation lands on the new file and the old one.
        if len(exact) > 1:
            for r in exact:
                f.add(r.loc.file, r.loc.line, "graph.duplicate-identity", f"`{var}` is defined by "
                      f"{', '.join(x.spec.name for x in exact)}; make them variants with keys")
        elif exact and variants:
            for r in exact + variants:
                f.add(r.loc.file, r.loc.line, "graph.ambiguous-definition", f"`{var}` has an exact definition "
                      f"({exact[0].spec.name}) and variants ({', '.join(x.spec.name for x in variants)}); "
                      "make the exact one a variant too")
        keys: dict[str, str] = {}
        for r in variants:
            if r.spec.variant in keys:
                f.add(r.loc.file, r.loc.line, "graph.duplicate-variant", f"`{var}` has two variants keyed "
                      f"`{r.spec.variant}` ({keys[r.spec.variant]}, {r.spec.name})")
            keys[r.spec.variant] = r.spec.name
    used = {n for rel in cat.relations.values() for n in rel.names}
    roots = set(graph.roots)
    for name, var in sorted(cat.variables.items()):
        loc = var.loc
        if name in roots:
            if var.spec.root is None:
                f.add(loc.file, loc.line, "graph.root-undeclared", f"`{name}` is a root input (no relation "
                      "defines it) and must declare `root: {category, family}`")
            if name not in used and name not in cat.headline_targets:
                f.add(loc.file, loc.line, "graph.orphan", f"`{name}` is neither defined nor used by any relation",
                      level=Level.WARNING)
        elif var.spec.root is not None:
            f.add(loc.file, loc.line, "graph.root-defined", f"`{name}` declares `root` but is defined by "
                  f"{', '.join(graph.definitions(name))}", level=Level.WARNING)


def _cache_dir(build_dir: Path) -> Path:
    return build_dir / "cache"


def run(catalog_dir: Path, build_dir: Path | None, write_manifest: bool, use_cache: bool = True) -> Result:
    """Check the catalog; build the manifest when there are no errors (and write it if asked)."""
    catalog_hash, _ = content_hash(catalog_dir, extra=GENERATOR + mf.SCHEMA_VERSION)
    result_cache = _cache_dir(build_dir) / f"result-{catalog_hash}.json" if build_dir and use_cache else None
    if result_cache is not None and result_cache.exists():
        try:
            cached = json.loads(result_cache.read_text())
            findings = Findings([Finding(**{**d, "level": Level(d["level"])}) for d in cached["findings"]])
            manifest = cached["manifest"]
            if write_manifest and manifest is not None:
                _write(manifest, build_dir)
            return Result(findings, manifest, catalog_hash, cached=True)
        except (OSError, ValueError, KeyError, TypeError):
            pass
    cat = load_catalog(catalog_dir)
    manifest = None
    if cat.units is not None:
        graph = graph_of(cat)
        check_graph(cat, graph)
        if not cat.findings.errors:
            sym_cache = SymbolicCache(_cache_dir(build_dir) / "symbolic.json" if build_dir and use_cache else None)
            try:
                manifest = mf.build_manifest(cat, graph, catalog_hash, sym_cache)
            except mf.RelationBuildError as exc:
                loc = exc.rel.loc
                cat.findings.add(loc.file, loc.line, exc.exc.id, f"{exc.rel.spec.name}: {exc.exc.message}")
    if write_manifest and manifest is not None:
        _write(manifest, build_dir)
    if result_cache is not None:
        _store(result_cache, cat.findings, manifest)
    return Result(cat.findings, manifest, catalog_hash)


def _write(manifest: dict, build_dir: Path) -> None:
    target = build_dir / "manifest.json"
    text = mf.dumps(manifest)
    if not target.exists() or target.read_text(encoding="utf-8") != text:
        mf.write(manifest, target)


def _store(path: Path, findings: Findings, manifest: dict | None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    for old in path.parent.glob("result-*.json"):
        old.unlink(missing_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"findings": [f.as_dict() for f in findings.items], "manifest": manifest}))
    tmp.replace(path)
