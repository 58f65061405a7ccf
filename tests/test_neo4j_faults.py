"""Faults and bad input: hostile strings travel as parameters and come back unchanged; Neo4j down
means exit 3 within 10 s and one line naming the URI; a wrong password is exit 3 with a clear
message (against a real server with authentication on: the session's, or a second one)."""

from __future__ import annotations

import copy
import json
import socket
import time
from pathlib import Path

import pytest
from helpers import SESSION_PASSWORD, LocalServer, compile_catalog, free_port, mini_catalog, neo4j_required, run_cli

from gpustack_compiler.base.errors import InputError
from gpustack_compiler.manifest.source import GRAPH_PARTS
from gpustack_compiler.neo4j.source import Neo4jSource

HOSTILE = [
    "}) DETACH DELETE n //",
    "x'}) MATCH (n) DETACH DELETE n //",
    'double " quote and \\" escaped',
    "back`tick`:Label) DETACH DELETE n //",
    "$name {name: $name} :param name => 1",
    "// comment\nMATCH (n) DETACH DELETE n;\n",
    "ünïcödé µs Ω 漢字 \u2028 \t tab",
]


def hostile_manifest(tmp_path: Path) -> dict:
    """A real compiled manifest whose free text (descriptions, units text, citations, symbols,
    expressions, file names) is replaced by hostile strings. Names keep the name pattern."""
    m = compile_catalog(mini_catalog(tmp_path), tmp_path / "build")
    m = copy.deepcopy(m)
    for i, (name, v) in enumerate(sorted(m["variables"].items())):
        v["description"] = HOSTILE[i % len(HOSTILE)]
        v["units"] = HOSTILE[(i + 1) % len(HOSTILE)]
        v["symbol"] = HOSTILE[(i + 2) % len(HOSTILE)]
        v["file"] = HOSTILE[(i + 3) % len(HOSTILE)]
        if v.get("root"):
            v["root"]["note"] = HOSTILE[(i + 4) % len(HOSTILE)]
    for i, (name, r) in enumerate(sorted(m["relations"].items())):
        r["description"] = HOSTILE[i % len(HOSTILE)]
        r["parts"] = {"expression": HOSTILE[(i + 1) % len(HOSTILE)]}
        r["canonical"] = HOSTILE[(i + 2) % len(HOSTILE)]
        r["latex"] = HOSTILE[(i + 3) % len(HOSTILE)]
    for i, (key, ref) in enumerate(sorted(m["references"].items())):
        ref["citation"] = HOSTILE[i % len(HOSTILE)]
    for i, (name, c) in enumerate(sorted(m["constants"].items())):
        c["description"] = HOSTILE[i % len(HOSTILE)]
    for s in m["systems"].values():
        s["description"] = HOSTILE[0]
    m[HOSTILE[1]] = list(HOSTILE)  # a table: its name and its content
    return m


def test_hostile_strings_travel_as_parameters(neo4j_db, tmp_path: Path) -> None:
    manifest = hostile_manifest(tmp_path)
    result = neo4j_db.load(manifest)
    tables = {k: v for k, v in manifest.items() if k not in GRAPH_PARTS}
    expected_nodes = (len(manifest["variables"]) + len(manifest["constants"]) + len(manifest["relations"])
                      + len(manifest["systems"]) + len(manifest["references"]) + len(manifest["presets"])
                      + len(tables) + 1)
    assert neo4j_db.counts()["nodes"] == result["nodes"] == expected_nodes  # nothing deleted, nothing extra
    with Neo4jSource(neo4j_db.settings) as neo:
        for name, v in manifest["variables"].items():
            assert neo.variable(name).to_dict() == v
        for name, r in manifest["relations"].items():
            assert neo.relation(name) == r
        for name, c in manifest["constants"].items():
            assert neo.constant(name).to_dict() == c
        assert neo.tables() == tables
        # stored as properties too, byte for byte
        for row in neo4j_db.run("MATCH (v:Variable) RETURN v.name AS name, v.description AS d, v.units AS u"):
            v = manifest["variables"][row["name"]]
            assert (row["d"], row["u"]) == (v["description"], v["units"])
        cites = {r["key"]: r["c"] for r in neo4j_db.run("MATCH (r:Reference) RETURN r.key AS key, r.citation AS c")}
        assert cites == {k: ref["citation"] for k, ref in manifest["references"].items()}
        # a hostile *requested* name is just an unknown name
        for text in HOSTILE:
            with pytest.raises(InputError, match="unknown name"):
                neo.cone(text)
            with pytest.raises(InputError, match="unknown name"):
                neo.subgraph(text)
            assert neo.variable(text) is None and neo.relation(text) is None
            assert neo.relations_defining([text]) == []
        assert neo.root_debt(system=HOSTILE[0]) == [] and neo.family_debt(system=HOSTILE[1]) == []
    assert neo4j_db.counts()["nodes"] == expected_nodes


def test_hostile_text_through_the_cli(neo4j_db, gpustack_cli, tmp_path: Path) -> None:
    catalog = mini_catalog(tmp_path)
    step = catalog / "training" / "step.yaml"
    evil = "x'}) DETACH DELETE n // \"quoted\" `tick`"
    step.write_text(step.read_text().replace("description: compute time", f"description: {json.dumps(evil)}"))
    base = ("--catalog", str(catalog), "--build-dir", str(tmp_path / "build"))
    assert gpustack_cli(*base, "compile", "--neo4j").returncode == 0
    nodes = neo4j_db.counts()["nodes"]
    shown = gpustack_cli(*base, "show", "training.t_compute", "--neo4j", "--json")
    assert shown.returncode == 0 and json.loads(shown.stdout)["description"] == evil
    for text in HOSTILE:
        res = gpustack_cli(*base, "show", text, "--neo4j")
        assert res.returncode == 2 and res.stderr.startswith("Error: unknown name"), res.stderr
        res = gpustack_cli(*base, "cone", text, "--neo4j")
        assert res.returncode == 2 and res.stderr.startswith("Error: "), res.stderr
    assert neo4j_db.counts()["nodes"] == nodes


def test_neo4j_down_is_exit_3_within_10_s(gpustack_cli) -> None:
    uri = f"bolt://127.0.0.1:{free_port()}"
    for runner, args in ((run_cli, ("stats", "--neo4j")),  # one as a real process, timed end to end
                         (gpustack_cli, ("root-debt", "--neo4j")),
                         (gpustack_cli, ("cone", "+econ.cost.per_token", "--neo4j")),
                         (gpustack_cli, ("show", "econ.cost.per_token", "--neo4j"))):
        t0 = time.monotonic()
        res = runner(*args, env={"NEO4J_URI": uri})
        assert time.monotonic() - t0 < 10
        assert res.returncode == 3 and res.stdout == ""
        [line] = res.stderr.strip().splitlines()
        assert line.startswith("Error: cannot reach Neo4j at " + uri), line


def test_neo4j_down_at_compile(gpustack_cli, tmp_path: Path) -> None:
    uri = f"bolt://127.0.0.1:{free_port()}"
    t0 = time.monotonic()
    res = gpustack_cli("--catalog", str(mini_catalog(tmp_path)), "--build-dir", str(tmp_path / "b"),
                       "compile", "--neo4j", "--uri", uri)
    assert time.monotonic() - t0 < 10
    assert res.returncode == 3
    [line] = res.stderr.strip().splitlines()
    assert uri in line and "Traceback" not in res.stderr


def test_server_that_never_answers_is_exit_3_within_10_s(gpustack_cli) -> None:
    """A port that accepts connections but never speaks Bolt (a hung server) is bounded too."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        uri = f"bolt://127.0.0.1:{listener.getsockname()[1]}"
        t0 = time.monotonic()
        res = gpustack_cli("stats", "--neo4j", env={"NEO4J_URI": uri})
        assert time.monotonic() - t0 < 10
    assert res.returncode == 3
    [line] = res.stderr.strip().splitlines()
    assert uri in line, line


@pytest.fixture(scope="module")
def auth_server(session_db, tmp_path_factory):
    """A real Neo4j with authentication on and a known password: the session's own when the tests
    started it, else (NEO4J_URI names someone else's server, whose password they need not know) a
    second one started here."""
    if session_db.started_here:
        yield session_db.settings.uri, SESSION_PASSWORD
        return
    from gpustack_compiler.neo4j.server import operations as srv

    password = SESSION_PASSWORD
    try:
        server = LocalServer(tmp_path_factory.mktemp("neo4j-auth"), auth=True, password=password, heap="256m",
                             pagecache="32m")
    except srv.Neo4jServerError as exc:
        if neo4j_required():
            pytest.fail(f"cannot start a second Neo4j with auth on: {exc}", pytrace=False)
        pytest.skip(f"cannot start a second Neo4j with auth on: {exc}")
    yield server.uri, password
    server.stop()


def test_wrong_password_is_exit_3_with_a_clear_message(auth_server, gpustack_cli, tmp_path: Path) -> None:
    uri, password = auth_server
    res = gpustack_cli("stats", "--neo4j", env={"NEO4J_URI": uri, "NEO4J_USER": "neo4j",
                                                "NEO4J_PASSWORD": "not-the-password"})
    assert res.returncode == 3 and "Traceback" not in res.stderr
    [line] = res.stderr.strip().splitlines()
    assert line.startswith(f"Error: Neo4j at {uri} rejected user `neo4j`: wrong user name or password"), line
    res = gpustack_cli("stats", "--neo4j", env={"NEO4J_URI": uri, "NEO4J_PASSWORD": ""})
    assert res.returncode == 3
    [line] = res.stderr.strip().splitlines()
    assert "requires a user and password" in line, line
    # the right password gets through: as options to a load, and from the environment to a query
    res = gpustack_cli("--catalog", str(mini_catalog(tmp_path)), "--build-dir", str(tmp_path / "b"), "compile",
                       "--neo4j", "--uri", uri, "--user", "neo4j", "--password", password, "--json")
    assert res.returncode == 0, res.stderr
    variables = json.loads(res.stdout)["variables"]
    res = gpustack_cli("stats", "--neo4j", "--json", env={"NEO4J_URI": uri, "NEO4J_USER": "neo4j",
                                                          "NEO4J_PASSWORD": password})
    assert res.returncode == 0 and json.loads(res.stdout)["variables"] == variables, res.stderr
