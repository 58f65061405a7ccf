"""A real Neo4j for the tests (never a mock).

- `NEO4J_URI` set: the tests (run in one process, `-n 0`) use that server (`NEO4J_USER`,
  `NEO4J_PASSWORD`, `NEO4J_DATABASE`), and refuse to run against a database holding data they did not
  create: it must be empty, or hold only a graph an earlier test session loaded (Build.loaded_by ==
  "pytest"). They empty it at the end.
- Otherwise the local Neo4j is started once per session (`neo4j_server.start`) on free ports (fixed
  ones collide when several sessions start at once on one machine) with its data, state and log
  under pytest's tmp directory, so a developer's own server and data are untouched; stopped at the end.
  Its authentication is on, with a password the tests know (SESSION_PASSWORD), so the tests of wrong
  and right passwords need no second server.
- `GPUSTACK_REQUIRE_NEO4J=1` (set by .ci/run): a Neo4j that cannot be started or reached fails the
  tests that need it instead of skipping them.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import (
    CATALOG,
    SESSION_PASSWORD,
    SESSION_USER,
    Engine,
    LocalServer,
    catalog_under_test,
    compile_catalog,
    run_cli_here,
    unavailable,
)

LOADED_BY = "pytest"
ENV_KEYS = ("NEO4J_URI", "NEO4J_USER", "NEO4J_PASSWORD", "NEO4J_DATABASE", "GPUSTACK_NEO4J_LOADED_BY")


class Neo4jDB:
    """The database the tests use, with the few helpers they share."""

    def __init__(self, settings, started_here: bool = False):
        from gpustack_compiler.neo4j.conn import driver

        self.settings = settings
        self.started_here = started_here  # then authentication is on, with SESSION_PASSWORD
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
    from gpustack_compiler.base.errors import GpustackError
    from gpustack_compiler.neo4j.conn import Neo4jSettings

    saved = {k: os.environ.get(k) for k in ENV_KEYS}
    server = None
    db = None
    try:
        if os.environ.get("NEO4J_URI"):
            if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1:
                pytest.fail("NEO4J_URI is one database for every test process: they would replace each other's "
                            "graph; run the tests in one process (add -n 0)", pytrace=False)
            settings = Neo4jSettings.resolve()
        else:
            from gpustack_compiler.neo4j.server import operations as srv

            try:
                server = LocalServer(tmp_path_factory.mktemp("neo4j"), auth=True, password=SESSION_PASSWORD,
                                     heap="1g", pagecache="256m")
            except srv.Neo4jServerError as exc:
                yield None, f"the local Neo4j could not be started: {exc}"
                return
            os.environ.pop("NEO4J_DATABASE", None)
            os.environ.update(NEO4J_URI=server.uri, NEO4J_USER=SESSION_USER, NEO4J_PASSWORD=SESSION_PASSWORD)
            settings = Neo4jSettings.resolve()
        os.environ["GPUSTACK_NEO4J_LOADED_BY"] = LOADED_BY  # what `gpustack compile --neo4j` records
        db = Neo4jDB(settings, started_here=server is not None)
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


@pytest.fixture(scope="module")
def build(tmp_path_factory) -> Path:
    """A build directory of the module's own (compile cache and manifest of the repository's catalog)."""
    return tmp_path_factory.mktemp("build")


@pytest.fixture(scope="module")
def engine(build: Path):
    """The library engine over the repository's catalog, compiled into the module's build directory."""
    from gpustack_sim import Engine as LibraryEngine

    return LibraryEngine.open(CATALOG, build)


@pytest.fixture(scope="module")
def browser():
    """Debian's headless Chromium through Playwright (never Playwright's own download)."""
    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(chromium).is_file():
        if os.environ.get("CI"):
            pytest.fail(f"no Chromium at {chromium} (.ci/run installs Debian's chromium)")
        pytest.skip("no Chromium (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        yield b
        b.close()


@pytest.fixture(scope="session")
def session_db(neo4j_session) -> Neo4jDB:
    """The session's database for module-scoped fixtures; skips (fails, when required) without one."""
    db, why = neo4j_session
    if db is None:
        unavailable(why)
    return db


@pytest.fixture
def neo4j_db(session_db: Neo4jDB) -> Neo4jDB:
    """The test database, checked to hold only data the tests made."""
    session_db.guard()
    return session_db


@pytest.fixture(scope="module")
def real_graph(session_db: Neo4jDB, real_manifest: dict) -> Neo4jDB:
    """The session's Neo4j holding the real catalog's graph, for a module that only reads it."""
    session_db.guard()
    session_db.load(real_manifest)
    return session_db


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
    """Build directory of the snapshot. Its compile cache is keyed by content, so commands given the
    repository's catalog find it warm too: tests of anything but a cold compile share it."""
    return tmp_path_factory.mktemp("real-build")


@pytest.fixture(scope="session")
def real_manifest(real_catalog: Path, real_build: Path) -> dict:
    """The full real catalog compiled to a manifest in tmp."""
    return compile_catalog(real_catalog, real_build)


@pytest.fixture(scope="session")
def real_engine(real_manifest: dict) -> Engine:
    """The engine over the real catalog, compiled once per session (resolvers only memoize: sharing
    one across tests leaks nothing between them)."""
    return Engine(manifest=real_manifest)


@pytest.fixture(scope="session")
def catalog_units(real_engine: Engine):
    """The catalog's unit system, for documents (sites files, protocols) read outside an engine."""
    return real_engine.units


@pytest.fixture
def gpustack_cli():
    """Runs `gpustack` in-process (see run_cli_here); tests that need a real process use run_cli."""
    return run_cli_here
