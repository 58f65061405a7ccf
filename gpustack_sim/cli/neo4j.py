"""`gpustack neo4j start|stop|status` (a local Neo4j without Docker) and the Neo4j side of
`gpustack compile --neo4j`.

Failures are InfrastructureError (exit 3), mapped to one `Error:` line in main.py.
"""

from __future__ import annotations

import os
from pathlib import Path

import typer

from gpustack_compiler.base.errors import InfrastructureError, InputError

from .app import EXIT_INFRA, JsonOpt, app, out

neo4j_app = typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_show_locals=False,
                        help="A local Neo4j 5.26 server without Docker (Bolt 7687, Browser on 7474).")

app.add_typer(neo4j_app, name="neo4j")

# Each data directory owns its server (its state files are kept in it): start, status and stop name it.
DataDirOpt = typer.Option(None, "--data-dir", help="Neo4j home, which owns its server and keeps its state "
                          "(default: neo4j-data in the user cache).")


def _server():
    from gpustack_compiler.neo4j.server import operations as server

    return server


def _describe(st: dict) -> str:
    if not st.get("running"):
        return f"Neo4j is not running (data {st.get('data_dir')})"
    parts = [f"Neo4j {st.get('neo4j_version')} running (pid {st['pid']}): {st['bolt_uri']}"]
    if st.get("browser_url"):
        parts.append(f"Browser {st['browser_url']}")
    parts.append(f"auth {'on' if st.get('auth') else 'off'}")
    if st.get("rss_mb") is not None:
        parts.append(f"{st['rss_mb']:.0f} MB resident")
    return ", ".join(parts) + f"\n  data {st.get('data_dir')}\n  log {st.get('log')}"


@neo4j_app.command()
def start(bolt_port: int = typer.Option(7687, "--bolt-port", min=1, max=65535, help="Bolt port on 127.0.0.1."),
          http_port: int = typer.Option(7474, "--http-port", min=0, max=65535,
                                        help="HTTP/Browser port on 127.0.0.1 (0: no HTTP)."),
          auth: bool = typer.Option(False, "--auth/--no-auth",
                                    help="Require a password (user neo4j; $GPUSTACK_NEO4J_PASSWORD)."),
          data_dir: Path = DataDirOpt,
          wait: float = typer.Option(120, "--wait", min=1, help="Seconds to wait until it is ready."),
          as_json: bool = JsonOpt) -> None:
    """Start the local Neo4j (built with Maven on first use) and wait until Bolt answers."""
    server = _server()
    try:
        st = server.start(bolt_port=bolt_port, http_port=http_port or None, auth=auth, data_dir=data_dir,
                          wait_seconds=wait)
    except server.Neo4jServerError as exc:
        raise InfrastructureError(str(exc), "see `gpustack neo4j status` and the log") from None
    text = _describe(st)
    text = ("already running: " if st.get("already_running") else f"started in {st.get('started_seconds')} s: ") + text
    out(st, text, as_json)


@neo4j_app.command()
def stop(timeout: float = typer.Option(30, "--timeout", min=1, help="Seconds before SIGKILL."),
         data_dir: Path = DataDirOpt, as_json: bool = JsonOpt) -> None:
    """Stop the local Neo4j of a data directory (idempotent); servers of other data directories keep running."""
    server = _server()
    try:
        st = server.stop(timeout=timeout, data_dir=data_dir)
    except server.Neo4jServerError as exc:
        raise InfrastructureError(str(exc)) from None
    out(st, f"stopped Neo4j (pid {st['pid']}) in {st['stop_seconds']} s" if st["stopped"]
         else f"Neo4j was not running (data {st['data_dir']})", as_json)


@neo4j_app.command()
def status(data_dir: Path = DataDirOpt, as_json: bool = JsonOpt) -> None:
    """Whether the local Neo4j of a data directory runs, its URIs and memory; exit 3 when it does not run."""
    server = _server()
    try:
        st = server.status(data_dir=data_dir)
    except server.Neo4jServerError as exc:
        raise InfrastructureError(str(exc)) from None
    out(st, _describe(st), as_json)
    if not st.get("running"):
        # as `pg_ctl status` and `systemctl status`: scripts test the exit code, not the text
        raise typer.Exit(EXIT_INFRA)


# ---- compile --neo4j --------------------------------------------------------------------------

def connection_options_used(uri, user, password, database, force) -> bool:
    return any(x is not None for x in (uri, user, password, database)) or bool(force)


def load_manifest(manifest: dict, manifest_path: Path, catalog: Path, uri: str | None, user: str | None,
                  password: str | None, database: str | None, force: bool) -> tuple[dict, str]:
    """Load the manifest just compiled into Neo4j; returns (data for --json, one line of text)."""
    from gpustack_compiler.manifest import serialise as mf
    from gpustack_compiler.neo4j.conn import Neo4jSettings
    from gpustack_compiler.neo4j.load import load

    settings = Neo4jSettings.resolve(uri, user, password, database)
    try:
        digest = mf.manifest_hash(manifest_path.read_text(encoding="utf-8"))
    except OSError:
        digest = None
    res = load(manifest, settings, force=force, manifest_hash=digest, catalog=catalog,
               loaded_by=os.environ.get("GPUSTACK_NEO4J_LOADED_BY") or "gpustack compile")
    text = (f"loaded into Neo4j at {settings.where}: {res['nodes']} nodes, {res['relationships']} relationships "
            f"in {res['seconds']:.2f} s (removed {res['removed_nodes']} stale nodes"
            + (f", {res['removed_foreign']} foreign nodes" if res["removed_foreign"] else "") + ")")
    return res, text


def reject_stray_options(neo4j: bool, uri, user, password, database, force) -> None:
    if not neo4j and connection_options_used(uri, user, password, database, force):
        raise InputError("--uri, --user, --password, --database and --force go with --neo4j")
