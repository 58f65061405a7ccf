"""Catalog statistics computed from the manifest: counts, coverage, and how connected each system is."""

from __future__ import annotations

from collections import Counter

from gpustack_compiler.language.models import LITERATURE_KINDS, RELATION_KINDS

from .graph import CatalogGraph

DATASHEET_KINDS = LITERATURE_KINDS | {"datasheet"}


def _share(part: int, whole: int) -> float | None:
    """None when there is nothing to measure, so an empty system never reads as fully covered."""
    return round(part / whole, 4) if whole else None


def headline_cone(manifest: dict, graph: CatalogGraph) -> tuple[set[str], set[str]]:
    """Variables and relations in the upstream cone of any headline target (targets included)."""
    variables: set[str] = set()
    relations: set[str] = set()
    for target in manifest.get("headline_targets", []):
        if target not in manifest["variables"]:
            continue
        variables.add(target)
        variables.update(graph.cone(target, upstream=True))
        relations.update(graph.cone_relations(target, upstream=True))
    for name, rel in manifest["relations"].items():
        if rel["kind"] == "constraint" and set(rel["constrains"]) & variables:
            relations.add(name)
    return variables, relations


def compute_stats(manifest: dict, graph: CatalogGraph) -> dict:
    variables, relations, refs = manifest["variables"], manifest["relations"], manifest["references"]
    kinds = Counter(r["kind"] for r in relations.values())
    cone_vars, cone_rels = headline_cone(manifest, graph)

    def cites(rel: dict, allowed: frozenset) -> bool:
        return any(refs.get(k, {}).get("kind") in allowed for k in rel["references"])

    systems = {}
    for system in manifest["systems"]:
        rels = [n for n, r in relations.items() if r["system"] == system]
        vars_ = [n for n, v in variables.items() if v["system"] == system]
        value_rels = [n for n in rels if relations[n]["kind"] != "constraint"]
        systems[system] = {
            "variables": len(vars_),
            "relations": len(rels),
            "roots": sum(1 for n in vars_ if variables[n]["is_root"]),
            "literature_share": _share(sum(cites(relations[n], LITERATURE_KINDS) for n in rels), len(rels)),
            "literature_or_datasheet_share": _share(sum(cites(relations[n], DATASHEET_KINDS) for n in rels),
                                                    len(rels)),
            "headline_cone_share": _share(sum(n in cone_rels for n in rels), len(rels)),
            "feeds_headline": any(n in cone_rels for n in value_rels),
        }
    order = graph.topological_order() if graph.is_acyclic() else []
    checked = sum(1 for r in relations.values() if r["dimension_checked"])
    return {
        "systems": len(manifest["systems"]),
        "variables": len(variables),
        "constants": len(manifest["constants"]),
        "relations": len(relations),
        "relations_by_kind": {k: kinds.get(k, 0) for k in RELATION_KINDS},
        "root_inputs": len(graph.roots),
        "leaves": len(graph.leaves),
        "cycles": len(graph.cycles()),
        "topological_order_length": len(order),
        "references": len(refs),
        "presets": len(manifest.get("presets", {})),
        "coverage": {
            "units": _share(sum(1 for v in variables.values() if v["units"]), len(variables)),
            "references": _share(
                sum(1 for e in [*variables.values(), *relations.values(), *manifest["constants"].values()]
                    if e["references"]),
                len(variables) + len(relations) + len(manifest["constants"])),
            "dimension_checks": _share(checked, len(relations)),
        },
        "headline_cone": {"variables": len(cone_vars), "relations": len(cone_rels),
                          "relation_share": _share(len(cone_rels), len(relations))},
        "by_system": systems,
    }
