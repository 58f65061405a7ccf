"""Neo4j and the in-memory manifest give identical answers on the full real catalog: cones of every
variable and constant (both directions; depth-limited on a sample), root debt per root and per family
(all systems, and a few one by one), subgraphs, records, names and stats; and the CLI prints the same.

Answers for every name run the package's own Cypher once per name in a single round trip
(`for_every`); the Python layer (Neo4jSource) is compared call by call on fixed samples."""

from __future__ import annotations

import json
import random

import pytest

from gpustack_compiler.manifest.records import ConstantRecord, VariableRecord
from gpustack_compiler.manifest.source import GRAPH_PARTS, ManifestSource
from gpustack_compiler.neo4j.conn import query
from gpustack_compiler.neo4j.source import Neo4jSource


@pytest.fixture(scope="module")
def sources(real_graph, real_manifest):
    with Neo4jSource(real_graph.settings) as neo:
        yield neo, ManifestSource(real_manifest), real_manifest


def test_catalog_is_the_full_one(sources) -> None:
    neo, mem, manifest = sources
    assert len(manifest["variables"]) > 50 and "econ.cost.per_token" in manifest["variables"]
    assert neo.build()["manifest_hash"]


def for_every(db, query_name: str, names: list[str], columns: str, **params) -> dict[str, dict]:
    """Run a fixed query of the package once per name, all in one round trip: the same Cypher text
    with `$name` bound by UNWIND (thousands of separate round trips would dominate the test time)."""
    body = "\n".join(line for line in query(query_name).splitlines() if not line.lstrip().startswith("//"))
    body = body.replace("CALL () {", "CALL (start_name) {").replace("$name", "start_name")
    text = f"UNWIND $names AS start_name CALL (start_name) {{\n{body}\n}}\nRETURN start_name, {columns}"
    return {r["start_name"]: r for r in db.run(text, names=names, **params)}


def test_cones_of_every_variable_and_constant(sources, real_graph) -> None:
    neo, mem, manifest = sources
    db = real_graph
    every = [*manifest["variables"], *manifest["constants"]]
    for upstream in (True, False):
        got = for_every(db, "cone_upstream" if upstream else "cone_downstream", every, "names, depths", depth=None)
        assert set(got) == set(every)
        bad = [n for n in every if dict(zip(got[n]["names"], got[n]["depths"])) != mem.cone(n, upstream)]
        assert not bad, (upstream, bad[:10])
    # the protocol itself (Neo4jSource.cone), whole and depth-limited, on a fixed sample
    sample = random.Random(0).sample(every, min(150, len(every))) + ["econ.cost.per_token"]
    mismatches = [(name, upstream, depth) for name in sample for upstream in (True, False)
                  for depth in (None, 1, 2) if neo.cone(name, upstream, depth) != mem.cone(name, upstream, depth)]
    assert not mismatches, mismatches[:10]
    assert len(neo.cone("econ.cost.per_token")) > 20


def test_subgraphs_of_every_variable(sources, real_graph) -> None:
    neo, mem, manifest = sources
    every = [*manifest["variables"], *manifest["constants"]]
    got = for_every(real_graph, "subgraph", every, "variables, constants, relations")

    def as_subgraph(target: str, row: dict) -> dict:
        typed = {"variables": VariableRecord.parse, "constants": ConstantRecord.parse, "relations": lambda x: x}
        return {"target": target, **{k: {x["name"]: typed[k](x) for x in map(json.loads, row[k])}
                                     for k in ("variables", "constants", "relations")}}

    bad = [n for n in every if as_subgraph(n, got[n]) != mem.subgraph(n)]
    assert not bad, bad[:10]
    sample = random.Random(2).sample(every, min(100, len(every))) + ["econ.cost.per_token"]
    bad = [n for n in sample if neo.subgraph(n) != mem.subgraph(n)]
    assert not bad, bad[:10]


def test_records_and_names(sources, real_graph) -> None:
    neo, mem, manifest = sources
    neo_db = real_graph
    # every record as stored, in bulk...
    for label, key in (("Variable", "variables"), ("Constant", "constants"), ("Relation", "relations")):
        rows = neo_db.run(f"MATCH (n:{label}) RETURN n.name AS name, n.record AS record")
        assert {r["name"]: json.loads(r["record"]) for r in rows} == manifest[key]
    # ...and through the protocol for a fixed sample of each kind
    rng = random.Random(1)
    for kind, key in (("variable", "variables"), ("constant", "constants"), ("relation", "relations")):
        names = sorted(manifest[key])
        for name in rng.sample(names, min(100, len(names))):
            assert getattr(neo, kind)(name) == getattr(mem, kind)(name), name
    assert neo.variable("econ.cost.per_token.nope") is None and neo.relation("econ.cost.per_token") is None
    assert neo.names() == mem.names()
    every = list(manifest["variables"])
    assert neo.relations_defining(every) == mem.relations_defining(every)
    assert neo.relations_defining(["econ.cost.per_token"]) == mem.relations_defining(["econ.cost.per_token"])


def test_root_debt_tables(sources) -> None:
    neo, mem, manifest = sources
    assert neo.root_debt() == mem.root_debt()
    assert neo.family_debt() == mem.family_debt()
    # filtered by system: the four systems with the most roots (the manifest side is the slow one here)
    roots = {}
    for v in manifest["variables"].values():
        roots[v["system"]] = roots.get(v["system"], 0) + v["is_root"]
    for system in sorted(roots, key=lambda k: (-roots[k], k))[:4] + ["no_such_system"]:
        assert neo.root_debt(system) == mem.root_debt(system), system
        assert neo.family_debt(system) == mem.family_debt(system), system
    # the family weight is a union: never more than the sum of its roots' weights, and here less somewhere
    rows = neo.root_debt()
    fam = {f.family: f for f in neo.family_debt()}
    sums = {}
    for r in rows:
        sums[r.family] = sums.get(r.family, 0) + r.weight
    assert all(fam[f].weight <= s for f, s in sums.items())
    assert any(fam[f].weight < s for f, s in sums.items())


def test_stats(sources) -> None:
    neo, mem, _ = sources
    assert neo.stats() == mem.stats()


def test_tables_and_batched_records(sources) -> None:
    neo, mem, manifest = sources
    assert neo.tables() == mem.tables()
    assert set(neo.tables()) == set(manifest) - GRAPH_PARTS
    names = [*manifest["variables"], "econ.cost.per_token.nope", *manifest["constants"]]
    assert neo.variables(names) == mem.variables(names)
    assert {n: v.to_dict() for n, v in mem.variables(names).items()} == manifest["variables"]
    assert neo.variables([]) == {}


@pytest.mark.parametrize("args", [
    ("cone", "+econ.cost.per_token", "--json"),
    ("cone", "gpu.peak_flops+2", "--json"),
    ("root-debt", "--json", "--limit", "1000"),
    ("root-debt", "--families", "--json", "--limit", "1000"),
    ("stats", "--json"),
    ("show", "econ.cost.per_token", "--json"),
])
def test_cli_answers_the_same(sources, gpustack_cli, real_catalog, real_build, args) -> None:
    base = ("--catalog", str(real_catalog), "--build-dir", str(real_build))
    mem = gpustack_cli(*base, *args)
    neo = gpustack_cli(*base, *args, "--neo4j")
    assert mem.returncode == 0 and neo.returncode == 0, (mem.stderr, neo.stderr)
    assert json.loads(neo.stdout) == json.loads(mem.stdout)
