"""The cone queries never enumerate paths: their plans expand breadth-first with pruning, and on a
graph of stacked diamonds (3^40 paths from top to bottom) the rows they touch stay proportional to
the graph's size."""

from __future__ import annotations

import time

import pytest

from gpustack_compiler.manifest.source import ManifestSource
from gpustack_compiler.neo4j.conn import query
from gpustack_compiler.neo4j.source import Neo4jSource

LAYERS, PARALLEL = 40, 3
CONE_QUERIES = ("cone_upstream", "cone_downstream", "subgraph", "root_debt", "family_debt")
PARAMS = {"name": "d.v040", "depth": None, "system": None, "top": 3}


def diamonds() -> dict:
    """v000 <- 3 relations <- v001 <- ... <- v040, each relation also fed by the layer below:
    3^40 paths from v040 down to v000, 121 variable-relation-variable steps."""
    var = lambda i: f"d.v{i:03d}"  # noqa: E731
    variables, relations, edges = {}, {}, []
    for i in range(LAYERS + 1):
        variables[var(i)] = {"name": var(i), "system": "d", "units": "1", "scale": 1.0, "dimension": {},
                             "description": f"layer {i}", "symbol": None, "quantity": None, "assumptions": [],
                             "bounds": None, "references": [], "is_root": i == 0, "is_leaf": i == LAYERS,
                             "root": {"category": "scenario_boundary", "family": "bottom", "note": None} if i == 0
                             else None, "file": "synthetic", "line": i + 1}
    for i in range(1, LAYERS + 1):
        for k in range(PARALLEL):
            name = f"{var(i)}.r{k}"
            inputs = [var(i - 1)] + ([var(i - 2)] if i >= 2 and k == 0 else [])
            relations[name] = {"name": name, "kind": "variant", "variant": f"r{k}", "system": "d", "defines": var(i),
                               "inputs": inputs, "parts": {"expression": " + ".join(inputs)},
                               "canonical": " + ".join(inputs), "latex": "x", "description": "diamond",
                               "references": [], "dimension_checked": True, "file": "synthetic", "line": 1}
            edges += [{"source": x, "target": name, "type": "FEEDS"} for x in inputs]
            edges.append({"source": name, "target": var(i), "type": "DEFINES"})
    return {"schema_version": "1.0", "catalog_hash": "diamonds", "headline_targets": [],
            "systems": {"d": {"name": "d", "prefix": "d", "description": "diamonds"}},
            "variables": variables, "constants": {}, "relations": relations, "edges": edges, "references": {},
            "presets": {}, "stats": {}}


def operators(plan) -> list[str]:
    out = [plan["operatorType"].split("@")[0]]
    for child in plan.get("children", []):
        out += operators(child)
    return out


def rows(plan) -> list[int]:
    out = [plan.get("rows", 0)]
    for child in plan.get("children", []):
        out += rows(child)
    return out


@pytest.fixture(scope="module")
def diamond_db(session_db):
    session_db.guard()
    manifest = diamonds()
    session_db.load(manifest)
    return session_db, manifest


@pytest.mark.parametrize("name", CONE_QUERIES)
def test_plan_expands_breadth_first_with_pruning(diamond_db, name: str) -> None:
    db, _ = diamond_db
    with db.driver.session(database=db.settings.database) as s:
        plan = s.run("EXPLAIN " + query(name), PARAMS).consume().plan
    ops = operators(plan)
    var_length = [op for op in ops if "VarLength" in op or "VarExpand" in op or "ShortestPath" in op]
    assert var_length, ops
    assert all(op.startswith("VarLengthExpand(Pruning,BFS") or op == "BFSPruningVarExpand" for op in var_length), ops
    assert "ProjectEndpoints" not in ops


@pytest.mark.parametrize("name", ("cone_upstream", "subgraph", "root_debt", "family_debt"))
def test_rows_stay_bounded_on_stacked_diamonds(diamond_db, name: str) -> None:
    db, manifest = diamond_db
    size = len(manifest["variables"]) + len(manifest["relations"])
    t0 = time.monotonic()
    with db.driver.session(database=db.settings.database) as s:
        plan = s.run("PROFILE " + query(name), PARAMS).consume().profile
    assert time.monotonic() - t0 < 5
    assert max(rows(plan)) <= 2 * size, (max(rows(plan)), size)  # 3^40 paths would be ~10^19 rows


def test_answers_on_stacked_diamonds_match_the_manifest(diamond_db) -> None:
    db, manifest = diamond_db
    neo, mem = Neo4jSource(db.settings), ManifestSource(manifest)
    try:
        up = neo.cone("d.v040")
        assert up == mem.cone("d.v040") and len(up) == LAYERS and up["d.v000"] == 20  # 2 layers per relation at best
        assert neo.cone("d.v000", upstream=False) == mem.cone("d.v000", upstream=False)
        assert neo.cone("d.v040", depth=3) == mem.cone("d.v040", depth=3)
        assert neo.root_debt() == mem.root_debt() and neo.root_debt()[0].weight == LAYERS
        assert neo.family_debt() == mem.family_debt()
        assert neo.subgraph("d.v040") == mem.subgraph("d.v040")
    finally:
        neo.close()
