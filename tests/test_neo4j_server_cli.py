"""`gpustack neo4j start|status|stop` on a private cache directory and free ports (a developer's own
server and data are untouched): JSON alone on stdout, and a real server answering Bolt between."""

from __future__ import annotations

import json
import os

import pytest
from helpers import TEST_JVM_OPTS, free_port, neo4j_required, run_cli


@pytest.fixture
def private_cache(tmp_path):
    from gpustack_compiler.neo4j.server import operations as srv

    try:
        build = srv.ensure_built()
    except srv.Neo4jServerError as exc:
        if neo4j_required():
            pytest.fail(f"cannot build the Neo4j launcher: {exc}", pytrace=False)
        pytest.skip(f"cannot build the Neo4j launcher: {exc}")
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "neo4j-launcher").symlink_to(build.parent, target_is_directory=True)
    return {"GPUSTACK_CACHE_DIR": str(cache), "GPUSTACK_NEO4J_HEAP": "256m", "GPUSTACK_NEO4J_PAGECACHE": "32m",
            "GPUSTACK_NEO4J_JVM_OPTS": TEST_JVM_OPTS}


def test_start_status_stop(private_cache, gpustack_cli, tmp_path) -> None:
    # `start` in a process of its own, which the server must outlive; the rest in this one
    env = private_cache
    bolt = free_port()
    data = ["--data-dir", str(tmp_path / "data")]
    res = gpustack_cli("neo4j", "status", *data, "--json", env=env)
    assert res.returncode == 3 and json.loads(res.stdout)["running"] is False  # as `pg_ctl status`
    res = run_cli("neo4j", "start", "--bolt-port", str(bolt), "--http-port", "0", *data, "--json", env=env,
                  timeout=180)
    try:
        if res.returncode != 0 and not neo4j_required():
            pytest.skip(f"the local Neo4j could not be started: {res.stderr.strip()}")
        assert res.returncode == 0, res.stderr
        st = json.loads(res.stdout)
        assert st["running"] and st["bolt_uri"] == f"bolt://127.0.0.1:{bolt}" and st["pid"] > 0
        assert st["neo4j_version"].startswith("5.26")
        # the state is kept in the data directory, not in the shared cache
        assert (tmp_path / "data" / "neo4j.pid").read_text().strip() == str(st["pid"])
        assert not (tmp_path / "cache" / "neo4j.pid").exists()
        res = gpustack_cli("neo4j", "status", *data, env=env)
        assert res.returncode == 0 and "running" in res.stdout and f"127.0.0.1:{bolt}" in res.stdout
        # the default data directory has no server: its status says so
        res = gpustack_cli("neo4j", "status", env=env)
        assert res.returncode == 3
        # the server answers: an empty database says so through the graph commands
        res = gpustack_cli("stats", "--neo4j", env={**env, "NEO4J_URI": st["bolt_uri"]})
        assert res.returncode == 3 and "holds no gpustack graph" in res.stderr
        # a second server on the same data directory is refused
        res = gpustack_cli("neo4j", "start", "--bolt-port", str(free_port()), "--http-port", "0", *data, env=env)
        assert res.returncode == 3 and res.stderr.startswith("Error: Neo4j is already running on data directory")
    finally:
        stopped = gpustack_cli("neo4j", "stop", *data, "--json", env=env)
    assert stopped.returncode == 0 and json.loads(stopped.stdout)["stopped"] is True
    res = gpustack_cli("neo4j", "stop", *data, env=env)
    assert res.returncode == 0 and "not running" in res.stdout
    res = gpustack_cli("neo4j", "status", *data, env=env)
    assert res.returncode == 3 and res.stdout.startswith("Neo4j is not running") and res.stderr == ""
    assert os.environ.get("GPUSTACK_CACHE_DIR") != env["GPUSTACK_CACHE_DIR"]


def test_each_data_directory_owns_its_server(private_cache, gpustack_cli, tmp_path) -> None:
    # Two servers at once, on other ports and data directories; stopping one leaves the other running.
    env = private_cache
    one, two = ["--data-dir", str(tmp_path / "one")], ["--data-dir", str(tmp_path / "two")]
    ports = free_port(), free_port()
    try:
        for data, port in ((one, ports[0]), (two, ports[1])):
            res = run_cli("neo4j", "start", "--bolt-port", str(port), "--http-port", "0", *data, "--json",
                          env=env, timeout=180)
            if res.returncode != 0 and not neo4j_required():
                pytest.skip(f"the local Neo4j could not be started: {res.stderr.strip()}")
            assert res.returncode == 0, res.stderr
        res = gpustack_cli("neo4j", "stop", *one, "--json", env=env)
        assert res.returncode == 0 and json.loads(res.stdout)["stopped"] is True
        res = gpustack_cli("neo4j", "status", *two, "--json", env=env)
        assert res.returncode == 0, res.stdout
        st = json.loads(res.stdout)
        assert st["running"] and st["bolt_uri"] == f"bolt://127.0.0.1:{ports[1]}" and st["bolt_open"]
        assert gpustack_cli("neo4j", "status", *one, env=env).returncode == 3
    finally:
        for data in (one, two):
            gpustack_cli("neo4j", "stop", *data, env=env)


def test_status_without_a_server_is_exit_3(gpustack_cli, tmp_path) -> None:
    # No launcher needed: the state files in an empty cache say nothing runs.
    res = gpustack_cli("neo4j", "status", "--json", env={"GPUSTACK_CACHE_DIR": str(tmp_path)})
    assert res.returncode == 3 and json.loads(res.stdout)["running"] is False and res.stderr == ""
