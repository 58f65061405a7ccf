"""`gpustack compile --neo4j`: the graph model, idempotence, renames, and atomic replacement
(a load that fails or is SIGKILLed part-way leaves the previous graph intact), against a real Neo4j."""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import REPO, compile_catalog, mini_catalog, run_cli

from gpustack_compiler.manifest.source import GRAPH_PARTS
from gpustack_compiler.neo4j.load import plan

sys.path.insert(0, str(REPO / "benchmarks"))
from synthetic_catalog import generate  # noqa: E402

SNAPSHOT_SKIP = {"gpustack_load", "compiled_at"}


def snapshot(db) -> tuple[list, list]:
    """Every node (labels, properties) and relationship, without what changes on every compile."""
    nodes = db.run("MATCH (n) RETURN labels(n) AS labels, properties(n) AS props")
    edges = db.run("MATCH (a)-[e]->(b) RETURN coalesce(a.name, labels(a)[0]) AS a, type(e) AS t, "
                   "coalesce(b.name, labels(b)[0]) AS b, properties(e) AS props")

    def keep(props: dict) -> dict:
        return {k: v for k, v in props.items() if k not in SNAPSHOT_SKIP}

    norm_nodes = sorted(json.dumps([sorted(n["labels"]), keep(n["props"])], sort_keys=True) for n in nodes)
    norm_edges = sorted((e["a"], e["t"], e["b"], sorted(keep(e["props"]))) for e in edges)
    return norm_nodes, norm_edges


def names(db, label: str) -> set[str]:
    return {r["name"] for r in db.run(f"MATCH (n:{label}) RETURN n.name AS name")}


@pytest.fixture
def mini(tmp_path: Path) -> Path:
    return mini_catalog(tmp_path)


def compile_neo4j(gpustack_cli, catalog: Path, build: Path, *extra: str):
    return gpustack_cli("--catalog", str(catalog), "--build-dir", str(build), "compile", "--neo4j", *extra)


def test_compile_into_neo4j_builds_the_graph_model(neo4j_db, gpustack_cli, mini: Path, tmp_path: Path) -> None:
    neo4j_db.wipe()
    build = tmp_path / "build"
    res = compile_neo4j(run_cli, mini, build, "--json")  # a real process, as a user runs it
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    manifest = json.loads((build / "manifest.json").read_text())
    loaded = data["neo4j"]
    assert loaded["uri"] == os.environ["NEO4J_URI"]
    counts = neo4j_db.counts()
    assert (counts["nodes"], counts["relationships"]) == (loaded["nodes"], loaded["relationships"])

    # one Build node: the manifest's own hash, the catalog hash, when and from which commit
    [b] = neo4j_db.run("MATCH (b:Build) RETURN properties(b) AS b")
    b = b["b"]
    assert b["manifest_hash"] == hashlib.sha256((build / "manifest.json").read_bytes()).hexdigest()
    assert b["catalog_hash"] == manifest["catalog_hash"] and b["compiled_at"] and b["loaded_by"] == "pytest"
    assert b["catalog_commit"] == "unknown"  # a catalog outside any git checkout has no commit

    # nodes: every variable, constant, relation, system and reference, with their labels
    assert names(neo4j_db, "Variable") == set(manifest["variables"])
    assert names(neo4j_db, "Constant") == set(manifest["constants"])
    assert names(neo4j_db, "Relation") == set(manifest["relations"])
    assert names(neo4j_db, "System") == set(manifest["systems"])
    assert names(neo4j_db, "Reference") == set(manifest["references"])
    assert names(neo4j_db, "Root") == {n for n, v in manifest["variables"].items() if v["is_root"]}
    assert names(neo4j_db, "Leaf") == {n for n, v in manifest["variables"].items() if v["is_leaf"]}
    assert names(neo4j_db, "Identity") == {n for n, r in manifest["relations"].items() if r["kind"] == "identity"}
    # and every other top-level part of the manifest as a table, stored whole
    tables = {r["name"]: json.loads(r["json"]) for r in neo4j_db.run("MATCH (t:Table) RETURN t.name AS name, "
                                                                    "t.json AS json")}
    assert tables == {k: v for k, v in manifest.items() if k not in GRAPH_PARTS}
    assert {"units", "presets", "variant_keys", "references"} <= set(tables)

    # properties Browser shows on click
    [v] = neo4j_db.run("MATCH (v:Variable {name: 'training.t_compute'}) RETURN properties(v) AS p")
    p = v["p"]
    assert p["units"] == "s" and p["dimension"] == "time" and p["description"] == "compute time"
    assert p["family"] == "timing" and p["category"] == "needs_calibration" and p["file"].endswith("step.yaml")
    assert json.loads(p["record"]) == manifest["variables"]["training.t_compute"]
    [r] = neo4j_db.run("MATCH (r:Relation {name: 'training.t_step.sum'}) RETURN properties(r) AS p")
    assert r["p"]["expression"] == "training.t_compute + training.t_comm"
    assert r["p"]["canonical"] and r["p"]["latex"] and r["p"]["line"] > 0

    # relationships: data flows variable -FEEDS-> relation -DEFINES-> variable
    flow = neo4j_db.run("MATCH (a)-[:FEEDS]->(r:Relation {name: 'training.t_step.sum'})-[:DEFINES]->(b) "
                        "RETURN collect(a.name) AS inputs, b.name AS out")
    assert sorted(flow[0]["inputs"]) == ["training.t_comm", "training.t_compute"]
    assert flow[0]["out"] == "training.t_step"
    assert neo4j_db.run("MATCH (:Variable {name: 'training.t_step'})-[:IN_SYSTEM]->(s:System) RETURN s.name AS s") \
        == [{"s": "training"}]
    assert neo4j_db.run("MATCH (:Relation {name: 'training.t_step.sum'})-[:CITES]->(r:Reference) RETURN r.name AS r") \
        == [{"r": "narayanan2021_megatron"}]
    assert "loaded into Neo4j at" in compile_neo4j(gpustack_cli, mini, build).stdout


def test_a_new_table_needs_no_loader_change(real_manifest: dict) -> None:
    later = {**real_manifest, "run_bindings": {"gpus": "par.gpus"}}  # a part the manifest may grow
    [rows] = [rows for label, rows in plan(later).nodes if label == "Table"]
    assert {r["name"]: json.loads(r["props"]["json"]) for r in rows}["run_bindings"] == {"gpus": "par.gpus"}


def test_constraints_kinds_and_commit(neo4j_db, real_manifest: dict) -> None:
    neo4j_db.load(real_manifest, catalog=REPO / "catalog")
    [b] = neo4j_db.run("MATCH (b:Build) RETURN b.catalog_commit AS commit")
    assert re.fullmatch(r"[0-9a-f]{40}(\+dirty)?", b["commit"]), b
    cons = {n: r for n, r in real_manifest["relations"].items() if r["kind"] == "constraint"}
    got = neo4j_db.run("MATCH (c:Relation:Constraint)-[:CONSTRAINS]->(v) RETURN c.name AS c, collect(v.name) AS vs")
    expected = {n: sorted(set(r["constrains"])) for n, r in cons.items() if r["constrains"]}
    assert {g["c"]: sorted(g["vs"]) for g in got} == expected
    assert neo4j_db.run("MATCH (:Constraint)-[e:FEEDS|DEFINES]-() RETURN count(e) AS n") == [{"n": 0}]
    for kind in {r["kind"] for r in real_manifest["relations"].values()}:
        label = kind.capitalize()
        assert names(neo4j_db, label) == {n for n, r in real_manifest["relations"].items() if r["kind"] == kind}
    # presets for Browser: each assignment as the preset gives it, on an ASSIGNS relationship
    got = neo4j_db.run("MATCH (p:Preset) OPTIONAL MATCH (p)-[a:ASSIGNS]->(v:Variable) "
                       "RETURN p.name AS p, collect([v.name, a.value]) AS assigned")
    expected = {n: {v: a["value"] if isinstance(a, dict) else a for v, a in p["assignments"].items()}
                for n, p in real_manifest["presets"].items()}
    assert {g["p"]: {v: value for v, value in g["assigned"] if v is not None} for g in got} == expected
    schema = {r["name"] for r in neo4j_db.run("SHOW CONSTRAINTS YIELD name")}
    assert {"gpustack_variable_name", "gpustack_relation_name", "gpustack_constant_name", "gpustack_preset_name",
            "gpustack_table_name"} <= schema


def test_idempotent_and_renamed_entries_disappear(neo4j_db, gpustack_cli, mini: Path, tmp_path: Path) -> None:
    build = tmp_path / "build"
    assert compile_neo4j(gpustack_cli, mini, build).returncode == 0
    first = neo4j_db.counts(), snapshot(neo4j_db)
    assert compile_neo4j(gpustack_cli, mini, build).returncode == 0
    second = neo4j_db.counts(), snapshot(neo4j_db)
    assert first == second  # same counts, same nodes, labels, properties and relationships

    # rename a root, drop a reference from the relation and add a new variable
    step = mini / "training" / "step.yaml"
    text = step.read_text().replace("training.t_comm", "training.t_exposed_comm")
    step.write_text(text)
    res = compile_neo4j(gpustack_cli, mini, build, "--json")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["neo4j"]["removed_nodes"] >= 2  # the old variable and the old Build
    assert "training.t_comm" not in names(neo4j_db, "Variable")
    assert "training.t_exposed_comm" in names(neo4j_db, "Variable")
    inputs = neo4j_db.run("MATCH (a)-[:FEEDS]->(:Relation {name: 'training.t_step.sum'}) RETURN a.name AS a")
    assert sorted(i["a"] for i in inputs) == ["training.t_compute", "training.t_exposed_comm"]
    assert neo4j_db.counts()["nodes"] == first[0]["nodes"]
    assert neo4j_db.run("MATCH (b:Build) RETURN count(b) AS n") == [{"n": 1}]

    # a relation removed: its node and its edges go; the variable it defined becomes a root
    manifest = json.loads((build / "manifest.json").read_text())
    del manifest["relations"]["training.t_step.sum"]
    manifest["edges"] = [e for e in manifest["edges"] if "training.t_step.sum" not in (e["source"], e["target"])]
    manifest["variables"]["training.t_step"]["is_root"] = True
    neo4j_db.load(manifest)
    assert "training.t_step.sum" not in names(neo4j_db, "Relation")
    assert "training.t_step" in names(neo4j_db, "Root")
    assert neo4j_db.run("MATCH ()-[e:FEEDS|DEFINES]->() RETURN count(e) AS n") == [{"n": 0}]


def test_a_recompile_writes_only_what_changed(neo4j_db, real_manifest: dict) -> None:
    neo4j_db.wipe()
    first = neo4j_db.load(real_manifest)
    assert first["unchanged_nodes"] == first["unchanged_relationships"] == 0
    again = neo4j_db.load(real_manifest)
    assert again["unchanged_nodes"] == again["nodes"] - 1  # all but the new Build
    assert again["unchanged_relationships"] == again["relationships"]
    assert (again["removed_nodes"], again["removed_relationships"]) == (1, 0)  # the old Build

    # one variable's description and one preset's assignment change: the variable, the preset (its
    # outgoing ASSIGNS edge changed), the presets table and that edge are written (and the Build)
    edited = json.loads(json.dumps(real_manifest))
    edited["variables"]["gpu.power.dynamic"]["description"] = "edited"
    preset, var = next((n, v) for n, p in sorted(edited["presets"].items()) for v, a in sorted(p["assignments"].items())
                       if not isinstance(a, dict))
    edited["presets"][preset]["assignments"][var] = "12345"
    res = neo4j_db.load(edited)
    assert res["unchanged_nodes"] == res["nodes"] - 4 and res["unchanged_relationships"] == res["relationships"] - 1
    assert neo4j_db.run("MATCH (v:Variable {name: 'gpu.power.dynamic'}) RETURN v.description AS d") == [{"d": "edited"}]
    assert neo4j_db.run("MATCH (:Preset {name: $p})-[a:ASSIGNS]->(:Variable {name: $v}) RETURN a.value AS x",
                        p=preset, v=var) == [{"x": "12345"}]
    patched = snapshot(neo4j_db)
    neo4j_db.wipe()
    neo4j_db.load(edited)
    assert snapshot(neo4j_db) == patched  # the graph a load writes whole

    # edits by hand: a label or property added, an edge drawn go at the next compile; a value changed in
    # place survives until the entry changes, or --force
    neo4j_db.run("MATCH (v:Variable {name: 'gpu.power.dynamic'}) SET v:Extra, v.note = 'mine'")
    neo4j_db.run("MATCH (v:Variable {name: 'par.ep'}) SET v.units = 'W'")
    neo4j_db.run("MATCH (a:Variable {name: 'par.dp'}), (b:Relation) WITH a, b LIMIT 1 CREATE (a)-[:FEEDS]->(b)")
    neo4j_db.load(edited)
    assert snapshot(neo4j_db) != patched
    assert neo4j_db.run("MATCH (v:Extra) RETURN count(v) AS n") == [{"n": 0}]
    assert neo4j_db.run("MATCH (v:Variable {name: 'par.ep'}) RETURN v.units AS u") == [{"u": "W"}]
    assert neo4j_db.run("MATCH (:Variable {name: 'par.dp'})-[e]->() RETURN count(e) AS n") == \
        [{"n": sum(a == ("Variable", "par.dp") for _, rows in plan(edited).edges for a, _, _ in rows)}]
    forced = neo4j_db.load(edited, force=True)
    assert forced["unchanged_nodes"] == forced["unchanged_relationships"] == 0
    assert snapshot(neo4j_db) == patched


def test_failure_part_way_rolls_back(neo4j_db, mini: Path, tmp_path: Path, real_manifest: dict,
                                     monkeypatch) -> None:
    old = compile_catalog(mini, tmp_path / "build")
    neo4j_db.load(old)
    before = neo4j_db.counts(), snapshot(neo4j_db)

    def explode(step: str, done: int, total: int) -> None:
        if step.startswith("Relation"):
            raise RuntimeError("disk on fire")

    with pytest.raises(RuntimeError, match="disk on fire"):
        neo4j_db.load(real_manifest, batch_size=100, progress=explode)
    assert (neo4j_db.counts(), snapshot(neo4j_db)) == before

    # a load that finds its plan inconsistent part-way (after writing nodes) is rolled back
    from gpustack_compiler.base.errors import InfrastructureError
    from gpustack_compiler.neo4j import load as neo4j_load

    real_plan = neo4j_load.plan
    bad = real_plan(real_manifest)
    bad.edges.append(("FEEDS", [(("Variable", "no.such.variable"), ("Relation", "no.such.relation"), {})]))
    monkeypatch.setattr(neo4j_load, "plan", lambda *a, **k: bad)
    with pytest.raises(InfrastructureError, match="rolled back.*previous graph is unchanged") as exc:
        neo4j_db.load(real_manifest)
    assert os.environ["NEO4J_URI"] in exc.value.message
    assert (neo4j_db.counts(), snapshot(neo4j_db)) == before

    # and so is one the database rejects part-way (a property Neo4j cannot store, in the last batch)
    bad = real_plan(real_manifest)
    label, rows = bad.nodes[-1]
    rows[-1]["props"]["mixed"] = [1, "one"]
    monkeypatch.setattr(neo4j_load, "plan", lambda *a, **k: bad)
    with pytest.raises(InfrastructureError, match="refused a query.*rolled back.*previous graph is unchanged"):
        neo4j_db.load(real_manifest, batch_size=50)
    assert (neo4j_db.counts(), snapshot(neo4j_db)) == before


PAUSING_LOADER = """
import json, sys, time
from gpustack_compiler.neo4j.conn import Neo4jSettings
from gpustack_compiler.neo4j.load import load

manifest = json.load(open(sys.argv[1]))

def progress(step, done, total):
    if step.startswith("Relation"):  # variables, constants, systems, references already written
        print("PAUSED", step, done, flush=True)
        time.sleep(600)

load(manifest, Neo4jSettings.resolve(), loaded_by="pytest", batch_size=100, progress=progress)
print("FINISHED", flush=True)
"""

OPEN_WRITES = ("SHOW TRANSACTIONS YIELD transactionId, activeLockCount, currentQuery, status "
               "WHERE activeLockCount > 0 RETURN transactionId, activeLockCount, currentQuery")


def wait_until_no_open_writes(db, seconds: float = 15) -> None:
    deadline = time.monotonic() + seconds
    while db.run(OPEN_WRITES):
        assert time.monotonic() < deadline, f"the killed load's transaction is still open: {db.run(OPEN_WRITES)}"
        time.sleep(0.05)


def test_sigkill_mid_load_leaves_old_graph_intact(neo4j_db, mini: Path, tmp_path: Path, real_manifest: dict) -> None:
    old = compile_catalog(mini, tmp_path / "build")
    neo4j_db.load(old)
    before = neo4j_db.counts(), snapshot(neo4j_db)
    new_path = tmp_path / "new.json"
    new_path.write_text(json.dumps(real_manifest))
    proc = subprocess.Popen([sys.executable, "-c", PAUSING_LOADER, str(new_path)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=REPO)
    try:
        line = proc.stdout.readline()
        assert line.startswith("PAUSED"), (line, proc.stderr.read() if proc.poll() is not None else "")
        # mid-load: thousands of nodes written and locked in the open transaction...
        writes = neo4j_db.run(OPEN_WRITES)
        assert writes and writes[0]["activeLockCount"] > 100, writes
        # ...while readers still see the old graph, whole
        assert (neo4j_db.counts(), snapshot(neo4j_db)) == before
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGKILL
    wait_until_no_open_writes(neo4j_db)
    assert (neo4j_db.counts(), snapshot(neo4j_db)) == before
    assert "econ.cost.per_token" not in names(neo4j_db, "Variable")
    # and the next compile goes through (no lock left behind)
    result = neo4j_db.load(real_manifest)
    assert result["previous_manifest_hash"] == before[0]["manifest_hash"]
    assert "econ.cost.per_token" in names(neo4j_db, "Variable")


def test_sigkill_of_the_cli_mid_load(neo4j_db, gpustack_cli, mini: Path, tmp_path: Path) -> None:
    """The same with the real `gpustack compile --neo4j` and no hook: killed while its load runs."""
    old_build = tmp_path / "old-build"
    assert compile_neo4j(gpustack_cli, mini, old_build).returncode == 0
    before = neo4j_db.counts(), snapshot(neo4j_db)
    syn = generate(tmp_path / "syn", 2500, 1700, seed=3)
    build = tmp_path / "syn-build"
    compile_catalog(syn, build)  # warm the compile cache: the CLI then spends its time loading
    cmd = [sys.executable, "-c", "from gpustack_sim.cli.main import main; main()", "--catalog", str(syn),
           "--build-dir", str(build), "compile", "--neo4j"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
    seen = None
    try:
        deadline = time.monotonic() + 60
        while seen is None and proc.poll() is None and time.monotonic() < deadline:
            seen = next((w for w in neo4j_db.run(OPEN_WRITES) if "UNWIND $rows" in (w["currentQuery"] or "")
                         and w["activeLockCount"] > 0), None)
        if seen is not None:
            proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert seen is not None, f"never caught the load in flight (exit {proc.returncode}: {proc.stderr.read()[-300:]})"
    assert proc.returncode == -signal.SIGKILL
    wait_until_no_open_writes(neo4j_db)
    assert (neo4j_db.counts(), snapshot(neo4j_db)) == before


def test_refuses_a_database_with_foreign_nodes(neo4j_db, gpustack_cli, mini: Path, tmp_path: Path) -> None:
    build = tmp_path / "build"
    assert compile_neo4j(gpustack_cli, mini, build).returncode == 0
    neo4j_db.run("CREATE (:Person {name: 'Ada'})-[:KNOWS]->(:Person {name: 'Charles'})")
    try:
        before = neo4j_db.counts()
        t0 = time.monotonic()
        res = compile_neo4j(gpustack_cli, mini, build)
        assert res.returncode == 2, res.stderr
        [line] = res.stderr.strip().splitlines()
        assert line.startswith("Error: ") and "2 node(s) gpustack did not create" in line and "--force" in line
        assert os.environ["NEO4J_URI"] in line and "Person" in line
        assert neo4j_db.counts() == before
        assert time.monotonic() - t0 < 30
        res = compile_neo4j(gpustack_cli, mini, build, "--force", "--json")
        assert res.returncode == 0, res.stderr
        assert json.loads(res.stdout)["neo4j"]["removed_foreign"] == 2
        assert neo4j_db.run("MATCH (p:Person) RETURN count(p) AS n") == [{"n": 0}]
    finally:
        neo4j_db.run("MATCH (p:Person) DETACH DELETE p")


def test_connection_options_need_neo4j(gpustack_cli, mini: Path, tmp_path: Path) -> None:
    res = gpustack_cli("--catalog", str(mini), "--build-dir", str(tmp_path), "compile", "--force")
    assert res.returncode == 2 and "go with --neo4j" in res.stderr
