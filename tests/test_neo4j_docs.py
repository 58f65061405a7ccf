"""Every ```cypher block of docs/cypher.md runs against the real catalog in a real Neo4j: no error,
no deprecation warning, breadth-first expansions only, and rows where the cookbook promises some."""

from __future__ import annotations

import re

import pytest
from helpers import REPO

DOC = REPO / "docs" / "cypher.md"
BLOCKS = re.findall(r"```cypher\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
# Queries that must find something in the real catalog (first line, as in the doc).
MUST_FIND = ("MATCH (b:Build)", "MATCH (n)", "MATCH p = (t:Variable {name: 'econ.cost.per_token'})",
             "MATCH (t:Variable {name: 'econ.cost.per_token'})<-[:FEEDS|DEFINES*0..]-(x)",
             "MATCH (r:Root)", "MATCH (r:Root {family:", "MATCH (r:Variant)-[:DEFINES]->(v:Variable)",
             "MATCH (:Variable {name: 'mem.hbm.bandwidth'})-[:FEEDS]->", "MATCH (c:Constraint)-[:CONSTRAINS]->",
             "MATCH (p:Preset)-[a:ASSIGNS]->")


def operators(plan) -> list[str]:
    out = [plan["operatorType"].split("@")[0]]
    for child in plan.get("children", []):
        out += operators(child)
    return out


@pytest.fixture(scope="module")
def doc_db(real_graph):
    drv = real_graph.new_driver(notifications_min_severity="WARNING")
    yield drv, real_graph.settings.database
    drv.close()


def test_the_cookbook_has_queries() -> None:
    assert len(BLOCKS) >= 15


@pytest.mark.parametrize("cypher", BLOCKS, ids=[b.splitlines()[0][:60] for b in BLOCKS])
def test_cookbook_query_runs(doc_db, cypher: str) -> None:
    drv, database = doc_db
    with drv.session(database=database) as s:
        result = s.run(cypher)
        records = list(result)
        summary = result.consume()
        warnings = [g for g in summary.gql_status_objects if g.is_notification and
                    str(g.severity).upper().endswith("WARNING")]
        assert not warnings, [g.status_description for g in warnings]
        plan = s.run("EXPLAIN " + cypher).consume().plan
    var_length = [op for op in operators(plan) if "VarLength" in op]
    assert all(op.startswith("VarLengthExpand(Pruning,BFS") for op in var_length), var_length
    first = cypher.strip().splitlines()[0]
    if any(first.startswith(m) for m in MUST_FIND):
        assert records, f"no rows from: {first}"
