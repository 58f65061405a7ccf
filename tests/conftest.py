"""A real Neo4j for the tests (never a mock).

- `NEO4J_URI` set: the tests use that server (`NEO4J_USER`, `NEO4J_PASSWORD`, `NEO4J_DATABASE`),
  and refuse to run against a database holding data they did not create: it must be empty, or hold
  only a graph an earlier test session loaded (Build.loaded_by == "pytest"). They empty it at the end.
- Otherwise the local Neo4j is started once per session (`neo4j_server.start`) on non-default ports
  (bolt 17687 / http 17474, or free ports if those are taken) with its data, state and log under
  pytest's tmp directory, so a developer's own server and data are untouched; stopped at the end.
- `GPUSTACK_REQUIRE_NEO4J=1` (set by .ci/run): a Neo4j that cannot be started or reached fails the
  tests that need it instead of skipping them.
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

TEST_BOLT_PORT, TEST_HTTP_PORT = 17687, 17474
LOADED_BY = "pytest"
ENV_KEYS = ("NEO4J_URI", "NEO4J_USER", "NEO4J_PASSWORD", "NEO4J_DATABASE", "GPUSTACK_NEO4J_LOADED_BY")


def neo4j_required() -> bool:
    return os.environ.get("GPUSTACK_REQUIRE_NEO4J") == "1"


def unavailable(reason: str):
    if neo4j_required():
        pytest.fail(f"Neo4j is required (GPUSTACK_REQUIRE_NEO4J=1) but {reason}", pytrace=False)
    pytest.skip(f"no Neo4j: {reason}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
        return False
    return True


@contextlib.contextmanager
def cache_env(cache: Path) -> Iterator[None]:
    """neo4j_server keeps its pid/state files in GPUSTACK_CACHE_DIR: point it at a private one."""
    old = os.environ.get("GPUSTACK_CACHE_DIR")
    os.environ["GPUSTACK_CACHE_DIR"] = str(cache)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("GPUSTACK_CACHE_DIR", None)
        else:
            os.environ["GPUSTACK_CACHE_DIR"] = old


class LocalServer:
    """A Neo4j started by the tests with private state, data and ports (the launcher build is shared)."""

    def __init__(self, root: Path, bolt: int | None = None, http: int | None = None, with_http: bool = True,
                 **start_args):
        from gpustack_compiler.neo4j import server as srv

        self.srv = srv
        build = srv.ensure_built()  # in the user cache: built once, reused by every session
        self.cache = root / "cache"
        self.cache.mkdir(parents=True, exist_ok=True)
        link = self.cache / "neo4j-launcher"
        if not link.exists():
            link.symlink_to(build.parent, target_is_directory=True)
        self.bolt = bolt if bolt and port_free(bolt) else free_port()
        self.http = (http if http and port_free(http) else free_port()) if with_http else None
        with cache_env(self.cache):
            self.status = srv.start(bolt_port=self.bolt, http_port=self.http, data_dir=root / "data",
                                    **start_args)
        self.uri = self.status["bolt_uri"]

    def stop(self) -> None:
        with cache_env(self.cache):
            self.srv.stop(timeout=20)


class Neo4jDB:
    """The database the tests use, with the few helpers they share."""

    def __init__(self, settings):
        from gpustack_compiler.neo4j.conn import driver

        self.settings = settings
        self.driver = driver(settings)

    def new_driver(self, **config):
        """Another driver to the same database (e.g. with notifications on)."""
        import neo4j

        s = self.settings
        return neo4j.GraphDatabase.driver(s.uri, auth=(s.user, s.password) if s.password is not None else None,
                                          **config)

    def run(self, cypher: str, **params) -> list[dict]:
        with self.driver.session(database=self.settings.database) as s:
            return [r.data() for r in s.run(cypher, params)]

    def load(self, manifest: dict, **kw) -> dict:
        from gpustack_compiler.neo4j.load import load

        return load(manifest, self.settings, loaded_by=LOADED_BY, **kw)

    def counts(self) -> dict:
        rec = self.run("CALL () { MATCH (n) RETURN count(n) AS nodes } "
                       "CALL () { MATCH ()-[e]->() RETURN count(e) AS relationships } "
                       "OPTIONAL MATCH (b:Build) RETURN nodes, relationships, b.manifest_hash AS manifest_hash")[0]
        return rec

    def wipe(self) -> None:
        self.run("MATCH (n) CALL (n) { DETACH DELETE n } IN TRANSACTIONS OF 5000 ROWS")

    def foreign_data(self) -> str | None:
        """Why the database holds data the tests did not create, or None if it holds none."""
        rec = self.run("CALL () { MATCH (n) RETURN count(n) AS nodes } "
                       "CALL () { MATCH (n) WHERE n.gpustack_load IS NULL RETURN count(n) AS foreign } "
                       "OPTIONAL MATCH (b:Build) RETURN nodes, foreign, collect(b.loaded_by) AS loaded_by")[0]
        if rec["nodes"] and (rec["foreign"] or rec["loaded_by"] != [LOADED_BY]):
            return (f"it holds {rec['nodes']} nodes the tests did not create ({rec['foreign']} without gpustack's "
                    f"marker, build loaded by {rec['loaded_by'] or 'nobody'})")
        return None

    def guard(self) -> None:
        """Refuse a database holding data the tests did not create."""
        why = self.foreign_data()
        if why:
            pytest.fail(f"refusing to run the Neo4j tests against {self.settings.where}: {why}; "
                        "point NEO4J_URI at an empty database", pytrace=False)

    def close(self) -> None:
        self.driver.close()


@pytest.fixture(scope="session")
def neo4j_session(tmp_path_factory) -> Iterator[tuple[Neo4jDB | None, str | None]]:
    """(database, None) or (None, why there is none); started/connected once per session."""
    from gpustack_compiler.errors import GpustackError
    from gpustack_compiler.neo4j.conn import Neo4jSettings

    saved = {k: os.environ.get(k) for k in ENV_KEYS}
    server = None
    db = None
    try:
        if os.environ.get("NEO4J_URI"):
            settings = Neo4jSettings.resolve()
        else:
            from gpustack_compiler.neo4j import server as srv

            try:
                server = LocalServer(tmp_path_factory.mktemp("neo4j"), TEST_BOLT_PORT, TEST_HTTP_PORT,
                                     heap="1g", pagecache="256m")
            except srv.Neo4jServerError as exc:
                yield None, f"the local Neo4j could not be started: {exc}"
                return
            for k in ("NEO4J_USER", "NEO4J_PASSWORD", "NEO4J_DATABASE"):
                os.environ.pop(k, None)
            os.environ["NEO4J_URI"] = server.uri
            settings = Neo4jSettings.resolve()
        os.environ["GPUSTACK_NEO4J_LOADED_BY"] = LOADED_BY  # what `gpustack compile --neo4j` records
        db = Neo4jDB(settings)
        try:
            db.run("RETURN 1")
        except Exception as exc:  # noqa: BLE001 - any failure to talk to it means: no Neo4j
            yield None, f"Neo4j at {settings.uri} does not answer: {exc}"
            return
        yield db, None
        if server is None:  # someone else's server: empty it again, but only of what the tests wrote
            with contextlib.suppress(Exception, GpustackError):
                if db.foreign_data() is None:
                    db.wipe()
    finally:
        if db is not None:
            db.close()
        if server is not None:
            server.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture
def neo4j_db(neo4j_session) -> Neo4jDB:
    """The test database, checked to hold only data the tests made."""
    db, why = neo4j_session
    if db is None:
        unavailable(why)
    db.guard()
    return db


# ---- shared by the Neo4j tests ----------------------------------------------------------------

REPO = Path(__file__).resolve().parent.parent


def catalog_under_test() -> Path:
    """The real catalog (GPUSTACK_TEST_CATALOG points the Neo4j tests at another one)."""
    return Path(os.environ.get("GPUSTACK_TEST_CATALOG") or REPO / "catalog")


def compile_catalog(catalog: Path, build: Path) -> dict:
    from gpustack_compiler import pipeline

    result = pipeline.run(catalog, build, write_manifest=True)
    if result.manifest is None:
        errors = [f.as_text() for f in sorted(result.findings.errors)][:5]
        pytest.fail(f"{catalog} does not compile: " + " | ".join(errors), pytrace=False)
    return result.manifest


@pytest.fixture(scope="session")
def real_catalog(tmp_path_factory) -> Path:
    """A snapshot of the real catalog taken once per session: the tests compare answers computed at
    different moments, and the catalog may be edited while they run."""
    import shutil

    dest = tmp_path_factory.mktemp("real") / "catalog"
    shutil.copytree(catalog_under_test(), dest)
    return dest


@pytest.fixture(scope="session")
def real_build(tmp_path_factory) -> Path:
    """Build directory of the snapshot (its compile cache makes later CLI runs on it warm)."""
    return tmp_path_factory.mktemp("real-build")


def loaded_db(neo4j_session, manifest: dict):
    """The session's Neo4j holding `manifest`; skips (or fails, when required) without a server."""
    db, why = neo4j_session
    if db is None:
        unavailable(why)
    db.guard()
    db.load(manifest)
    return db


@pytest.fixture(scope="session")
def real_manifest(real_catalog: Path, real_build: Path) -> dict:
    """The full real catalog compiled to a manifest in tmp."""
    return compile_catalog(real_catalog, real_build)


def run_cli(*args: str, env: dict | None = None, timeout: float = 120, cwd: Path = REPO):
    """`gpustack ARGS` in a subprocess, as a user runs it (environment: this process's, plus `env`)."""
    import subprocess
    import sys

    full_env = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-c", "from gpustack_sim.cli.main import main; main()", *args],
                          cwd=cwd, capture_output=True, text=True, timeout=timeout, env=full_env)


class CliResult:
    def __init__(self, returncode: int, stdout: str, stderr: str):
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


def run_cli_here(*args: str, env: dict | None = None) -> CliResult:
    """`gpustack ARGS` in this process, through the same `main()` (exit codes, one-line errors):
    a subprocess costs a second of imports, and the Neo4j tests run dozens of commands."""
    import io
    import sys
    from contextlib import redirect_stderr, redirect_stdout

    from gpustack_sim.cli.main import main

    saved_env = {k: os.environ.get(k) for k in (env or {})}
    saved_argv = sys.argv
    out, err = io.StringIO(), io.StringIO()
    code = 0
    try:
        os.environ.update(env or {})
        sys.argv = ["gpustack", *args]
        with redirect_stdout(out), redirect_stderr(err):
            main()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        sys.argv = saved_argv
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return CliResult(code, out.getvalue(), err.getvalue())


@pytest.fixture
def gpustack_cli():
    """Runs `gpustack` in-process (see run_cli_here); tests that need a real process use run_cli."""
    return run_cli_here
