"""check and compile: load, validate, graph checks, manifest. The whole result is cached by the
catalog's content hash and the compiler's own source, so a second run on an unchanged catalog only
hashes files (and a result an older compiler cached is not reused); the heavy modules (pydantic
models, sympy, networkx) are imported only on a cache miss."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from gpustack_compiler.base.atomic import write_text
from gpustack_compiler.base.errors import InputError
from gpustack_compiler.base.fileset import content_hash
from gpustack_compiler.base.findings import Findings, Level
from gpustack_compiler.manifest import serialise as mf

if TYPE_CHECKING:
    from gpustack_compiler.manifest.graph import CatalogGraph

    from .catalog import Catalog

GENERATOR = "gpustack-compiler 0.1.0"


@cache
def _compiler_digest() -> str:
    """The compiler's source files, hashed: a manifest cached before the compiler changed is stale."""
    root = Path(__file__).parent
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        h.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


@dataclass
class Result:
    findings: Findings
    manifest: dict | None
    catalog_hash: str
    cached: bool = False


def catalog_graph(cat: Catalog) -> CatalogGraph:
    from gpustack_compiler.manifest.graph import CatalogGraph

    from .manifest_build import relation_edges

    return CatalogGraph(cat.variables, cat.constants, relation_edges(cat))


def check_graph(cat: Catalog, graph: CatalogGraph) -> None:
    from gpustack_compiler.language.kinds import EXACT, KEYED

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
        exact = [r for r in rels if r.rules.role == EXACT]
        variants = [r for r in rels if r.rules.role == KEYED]
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


def run(catalog_dir: Path, build_dir: Path | None, write_manifest: bool, use_cache: bool = True,
        need_manifest: bool = True) -> Result:
    """Check the catalog; build the manifest when there are no errors (and write it if asked).

    With `need_manifest=False` a cached run returns findings without reading the manifest."""
    if build_dir is not None and build_dir.exists() and not build_dir.is_dir():
        # said before a compile that could only fail at its end, when it writes there
        raise InputError(f"build directory {build_dir} is not a directory", "pass --build-dir DIR")
    catalog_hash, _ = content_hash(catalog_dir, extra=GENERATOR + mf.SCHEMA_VERSION)
    cache = _cache_dir(build_dir) if build_dir and use_cache else None
    key = hashlib.sha256((catalog_hash + _compiler_digest()).encode()).hexdigest()[:32]
    if cache is not None:
        hit = _cached(cache, key, catalog_hash, build_dir if write_manifest else None, need_manifest)
        if hit is not None:
            return hit
    from .bindings import check_bindings
    from .catalog import load_catalog

    cat = load_catalog(catalog_dir)
    if cat.units is not None:
        check_bindings(cat)  # it reads the checked variables, presets and variants
    manifest = None
    if cat.units is not None:
        graph = catalog_graph(cat)
        check_graph(cat, graph)
        if not cat.findings.errors:
            from gpustack_compiler.language.symbolic import SymbolicCache

            from .manifest_build import RelationBuildError, build_manifest

            sym_cache = SymbolicCache(cache / "symbolic.json" if cache else None)
            try:
                manifest = build_manifest(cat, graph, catalog_hash, sym_cache)
            except RelationBuildError as exc:
                loc = exc.rel.loc
                cat.findings.add(loc.file, loc.line, exc.exc.id, f"{exc.rel.spec.name}: {exc.exc.message}")
    text = mf.dumps(manifest) if manifest is not None else None
    if write_manifest and text is not None:
        _write(text, build_dir)
    if cache is not None:
        _store(cache, key, cat.findings, text)
    # The manifest as written (keys sorted), so a fresh compile and a cached one are the same object.
    return Result(cat.findings, json.loads(text) if text is not None else None, catalog_hash)


def _cached(cache: Path, key: str, catalog_hash: str, write_to: Path | None, need_manifest: bool) -> Result | None:
    try:
        stored = json.loads((cache / f"result-{key}.json").read_text())
        findings = Findings.from_dicts(stored["findings"])
        manifest = None
        if stored["has_manifest"] and (need_manifest or write_to is not None):
            text = (cache / f"manifest-{key}.json").read_text(encoding="utf-8")
            if write_to is not None:
                _write(text, write_to)
            manifest = json.loads(text) if need_manifest else None
        return Result(findings, manifest, catalog_hash, cached=True)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _write(text: str, build_dir: Path) -> None:
    write_text(build_dir / "manifest.json", text)


def _store(cache: Path, key: str, findings: Findings, text: str | None) -> None:
    cache.mkdir(parents=True, exist_ok=True)
    for old in [*cache.glob("result-*.json"), *cache.glob("manifest-*.json")]:
        old.unlink(missing_ok=True)
    if text is not None:
        write_text(cache / f"manifest-{key}.json", text)
    write_text(cache / f"result-{key}.json",
               json.dumps({"findings": [f.to_dict() for f in findings.items], "has_manifest": text is not None}))
