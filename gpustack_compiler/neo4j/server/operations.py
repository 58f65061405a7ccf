"""A local Neo4j Community 5.26 server without Docker.

The server is a tiny Java launcher (``launcher/``, shipped as package data) that runs
Neo4j's own ``CommunityBootstrapper`` in one JVM: Bolt on 127.0.0.1:7687, HTTP (HTTP API,
Query API and Neo4j Browser at ``/browser/``) on 127.0.0.1:7474. On first use the launcher
is copied into the user cache and built with Maven (which downloads Neo4j's jars from Maven
Central into ``~/.m2``); later starts reuse that build.

Needs Java 17+ (Neo4j 5.26 supports 17 and 21) and Maven 3.6+ on PATH. Standard library only.

Files under :func:`cache_dir`::

    neo4j-launcher/<hash>/    launcher source + target/classes + lib/*.jar (the build)
    neo4j-launcher/build-<hash>.log   Maven output
    neo4j-data/               the default data directory

Each data directory (Neo4j home: data/, logs/, run/) owns its server and keeps its state beside it:
``neo4j.pid``, ``neo4j.state.json``, ``neo4j.log`` (launcher stdout/stderr) and ``neo4j.lock``. So
servers on other data directories and ports run side by side, and `stop` stops the one of the data
directory it is given, never another.

Environment: ``GPUSTACK_CACHE_DIR``, ``GPUSTACK_NEO4J_PASSWORD`` (password when auth is on),
``GPUSTACK_NEO4J_HEAP`` (default ``1g``), ``GPUSTACK_NEO4J_PAGECACHE`` (default ``256m``),
``GPUSTACK_NEO4J_JVM_OPTS`` (extra JVM flags), ``GPUSTACK_JAVA_HOME`` / ``JAVA_HOME`` (which
Java to use; else ``java`` on PATH), ``GPUSTACK_MVN`` (Maven executable; else ``mvn``).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any

__all__ = [
    "NEO4J_VERSION",
    "Neo4jServerError",
    "cache_dir",
    "default_data_dir",
    "ensure_built",
    "start",
    "status",
    "stop",
]

NEO4J_VERSION = "5.26.30"
HOST = "127.0.0.1"
DEFAULT_BOLT_PORT = 7687
DEFAULT_HTTP_PORT = 7474
PASSWORD_ENV = "GPUSTACK_NEO4J_PASSWORD"
MIN_PASSWORD_LENGTH = 8  # Neo4j's dbms.security.auth_minimum_password_length default

_MAIN_CLASS = "gpustack.neo4j.Launcher"
BROWSER_FILES = Path(__file__).resolve().parent / "browser"  # gpustack.grass and guide.html, served at /gpustack/
_READY = "NEO4J_LAUNCHER_READY"
_FAILED = "NEO4J_LAUNCHER_FAILED"
_LAUNCHER_PASSWORD_ENV = "NEO4J_LAUNCHER_PASSWORD"  # read by Launcher.java
_LAUNCHER_DIR = "launcher"
_SKIP_NAMES = {"target", "lib", "__pycache__"}
_MVN_ARGS = ["-q", "-B", "-Dstyle.color=never", "package", "dependency:copy-dependencies"]
_BUILD_TIMEOUT = 1800

# Neo4j's own defaults from neo4j.conf (server.jvm.additional). AlwaysPreTouch among them makes the whole
# heap resident at start (1 GB by default; GPUSTACK_NEO4J_HEAP shrinks it), and it is kept: without it the
# first large load touches the heap's pages as it goes, which made the 10,000-variable catalog's first load
# 16.4-17.6 s against 13.9-14.3 s with it (benchmarks/bench_neo4j.py's sequence, measured side by side).
_JVM_FLAGS = [
    "-XX:+AlwaysPreTouch",
    "-XX:+UseG1GC",
    "-XX:-OmitStackTraceInFastThrow",
    "-XX:+UnlockExperimentalVMOptions",
    "-XX:+TrustFinalNonStaticFields",
    "-XX:+DisableExplicitGC",
    "-XX:+ExitOnOutOfMemoryError",
    "-Djdk.nio.maxCachedBufferSize=1024",
    "-Dio.netty.tryReflectionSetAccessible=true",
    "-Dlog4j2.disable.jmx=true",
    "-Dlog4j.layout.jsonTemplate.maxStringLength=32768",
    "-Dfile.encoding=UTF-8",
    "--add-opens=java.base/java.nio=ALL-UNNAMED",
    "--add-opens=java.base/java.io=ALL-UNNAMED",
    "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
    "--enable-native-access=ALL-UNNAMED",
]

# Popen objects of servers started by this process, so stop() can reap them (no zombies).
_children: dict[int, subprocess.Popen] = {}


class Neo4jServerError(Exception):
    """Any failure to build, start, stop or inspect the local Neo4j server."""


# --------------------------------------------------------------------------- paths


def cache_dir() -> Path:
    """User cache dir: $GPUSTACK_CACHE_DIR, else $XDG_CACHE_HOME/gpustack, else ~/.cache/gpustack."""
    explicit = os.environ.get("GPUSTACK_CACHE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "gpustack"


def default_data_dir() -> Path:
    """Neo4j home of the default server (databases persist here across restarts)."""
    return cache_dir() / "neo4j-data"


def _data_dir(data_dir: str | os.PathLike | None) -> Path:
    return Path(data_dir).expanduser().resolve() if data_dir else default_data_dir().resolve()


def _pid_file(data: Path) -> Path:
    return data / "neo4j.pid"


def _state_file(data: Path) -> Path:
    return data / "neo4j.state.json"


def _log_file(data: Path) -> Path:
    return data / "neo4j.log"


@contextlib.contextmanager
def _locked(name: str, directory: Path | None = None) -> Iterator[None]:
    """Inter-process lock (several test processes may start/build at once), in `directory` (default the
    cache: the launcher build is shared; a server's lock is in its data directory)."""
    directory = directory or cache_dir()
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / name, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


# --------------------------------------------------------------------------- build


def _launcher_root() -> Any:
    if __package__:
        return resources.files(__package__).joinpath(_LAUNCHER_DIR)
    return Path(__file__).resolve().parent / _LAUNCHER_DIR


def _launcher_sources() -> list[tuple[str, bytes]]:
    """(relative path, content) of every shipped launcher source file, sorted."""
    files: list[tuple[str, bytes]] = []

    def walk(node: Any, prefix: str) -> None:
        for child in node.iterdir():
            if child.name.startswith(".") or child.name in _SKIP_NAMES:
                continue
            rel = f"{prefix}{child.name}"
            if child.is_dir():
                walk(child, rel + "/")
            elif child.is_file():
                files.append((rel, child.read_bytes()))

    root = _launcher_root()
    if not root.is_dir():
        raise Neo4jServerError(f"Neo4j launcher source not found in the package ({root})")
    walk(root, "")
    files.sort()
    if not any(rel == "pom.xml" for rel, _ in files):
        raise Neo4jServerError(f"Neo4j launcher source is incomplete (no pom.xml in {root})")
    return files


def _source_hash(files: list[tuple[str, bytes]]) -> str:
    h = hashlib.sha256()
    for rel, data in files:
        h.update(rel.encode() + b"\0" + hashlib.sha256(data).digest())
    return h.hexdigest()[:16]


def _find_java() -> tuple[str, int]:
    """Path and major version of the Java to use (17 or newer)."""
    java = None
    for var in ("GPUSTACK_JAVA_HOME", "JAVA_HOME"):
        home = os.environ.get(var)
        if home:
            candidate = Path(home) / "bin" / "java"
            if not os.access(candidate, os.X_OK):
                raise Neo4jServerError(f"${var}={home} has no executable bin/java")
            java = str(candidate)
            break
    if java is None:
        java = shutil.which("java")
    if java is None:
        raise Neo4jServerError("Java not found: install a JDK 17 or 21 (Neo4j 5.26 needs Java 17+) or set JAVA_HOME")
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise Neo4jServerError(f"cannot run {java} -version: {exc}") from None
    m = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    if not m:
        raise Neo4jServerError(f"cannot parse the version of {java}: {(out.stderr or out.stdout).strip()[:200]}")
    major = int(m.group(1))
    if major == 1 and m.group(2):
        major = int(m.group(2))
    if major < 17:
        raise Neo4jServerError(f"{java} is Java {major}; Neo4j 5.26 needs Java 17 or 21 (set JAVA_HOME)")
    return java, major


def _tail(path: Path, lines: int = 15) -> list[str]:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - 64 * 1024))
            text = fh.read().decode("utf-8", "replace")
    except OSError:
        return []
    text = re.sub(r"\x1b\[[0-9;]*m", "", text)
    return [ln.rstrip() for ln in text.splitlines() if ln.strip()][-lines:]


def _build_is_complete(build: Path) -> bool:
    return (
        (build / ".built").is_file()
        and (build / "target" / "classes" / "gpustack" / "neo4j" / "Launcher.class").is_file()
        and any((build / "lib").glob("neo4j-*.jar"))
    )


def ensure_built() -> Path:
    """Build the launcher in cache_dir()/neo4j-launcher/<hash>/ unless already built; return that dir.

    The hash covers the shipped launcher source, so an upgraded package rebuilds on its own.
    The first build downloads Neo4j's jars (about 180 MB) into ~/.m2 through Maven.
    """
    files = _launcher_sources()
    digest = _source_hash(files)
    root = cache_dir() / "neo4j-launcher"
    build = root / digest
    if _build_is_complete(build):
        return build
    with _locked("neo4j-build.lock"):
        if _build_is_complete(build):  # built by another process meanwhile
            return build
        java, _major = _find_java()
        mvn = os.environ.get("GPUSTACK_MVN") or shutil.which("mvn")
        if not mvn:
            raise Neo4jServerError("Maven (mvn) not found on PATH: install Maven 3.6+ to build the Neo4j launcher")
        if build.exists():
            shutil.rmtree(build)
        for rel, data in files:
            dest = build / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(data)
        log = root / f"build-{digest}.log"
        env = dict(os.environ)
        env["JAVA_HOME"] = str(Path(os.path.realpath(java)).parent.parent)
        started = time.monotonic()
        with open(log, "wb") as out:
            out.write(f"$ cd {build} && {shlex.join([mvn, *_MVN_ARGS])}\n".encode())
            out.flush()
            try:
                proc = subprocess.run(
                    [mvn, *_MVN_ARGS],
                    cwd=build,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    timeout=_BUILD_TIMEOUT,
                )
                rc = proc.returncode
            except subprocess.TimeoutExpired:
                rc = "timeout"
            except OSError as exc:
                raise Neo4jServerError(f"cannot run Maven ({mvn}): {exc}") from None
        if rc != 0 or not any((build / "lib").glob("neo4j-*.jar")):
            last = " | ".join(_tail(log, 8)) or "no output"
            raise Neo4jServerError(
                f"Maven build of the Neo4j launcher failed (exit {rc}); log: {log}; last lines: {last}"
            )
        (build / ".built").write_text(
            json.dumps({"hash": digest, "neo4j": NEO4J_VERSION, "seconds": round(time.monotonic() - started, 1)})
        )
        _prune_old_builds(root, keep=build)
        return build


def _prune_old_builds(root: Path, keep: Path) -> None:
    """Delete builds of older launcher sources (~140 MB each), except those a running server uses (servers
    of any data directory: their command lines name their build's folder, perhaps through a linked cache)."""
    in_use = _launcher_command_lines()
    for entry in root.iterdir():
        if entry == keep or any(f"/{entry.name}/".encode() in cmd for cmd in in_use):
            continue
        if entry.is_dir() and re.fullmatch(r"[0-9a-f]{16}", entry.name):
            shutil.rmtree(entry, ignore_errors=True)
            with contextlib.suppress(FileNotFoundError):
                (root / f"build-{entry.name}.log").unlink()


# --------------------------------------------------------------------------- process helpers


def _proc_state(pid: int) -> str | None:
    """State letter from /proc/PID/stat, or None if there is no such process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read().decode("ascii", "replace")
        return stat.rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def _reap(pid: int) -> None:
    child = _children.get(pid)
    if child is not None:
        if child.poll() is not None:
            _children.pop(pid, None)
        return
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def _alive(pid: int) -> bool:
    _reap(pid)
    state = _proc_state(pid)
    return state is not None and state not in ("Z", "X")


def _is_launcher(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return _MAIN_CLASS.encode() in fh.read()
    except OSError:
        return False


def _launcher_command_lines() -> list[bytes]:
    """The command lines of every running launcher of this user."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                cmd = (entry / "cmdline").read_bytes()
                if _MAIN_CLASS.encode() in cmd:
                    found.append(cmd)
    return found


def _rss_bytes(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _port_open(port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=timeout):
            return True
    except OSError:
        return False


def _port_free(port: int) -> bool:
    if _port_open(port, timeout=0.3):
        return False
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((HOST, port))
        except OSError:
            return False
    return True


def _read_state(data: Path) -> dict | None:
    """The server of data directory `data` if its process is alive and is our launcher; clears stale files."""
    try:
        pid = int(_pid_file(data).read_text().strip())
    except (OSError, ValueError):
        pid = None
    if pid is None or not _alive(pid) or not _is_launcher(pid):
        if pid is not None:
            _clear_files(data)
        return None
    try:
        state = json.loads(_state_file(data).read_text())
    except (OSError, ValueError):
        state = {}
    state["pid"] = pid
    return state


def _clear_files(data: Path) -> None:
    for f in (_pid_file(data), _state_file(data)):
        with contextlib.suppress(FileNotFoundError):
            f.unlink()


def _uris(bolt_port: int, http_port: int | None, auth: bool | None = None) -> dict:
    # Browser's URL parameters: the server to connect to, and with auth off the no-auth method, so the
    # address connects at once instead of showing a login form.
    query = f"?dbms=bolt://{HOST}:{bolt_port}" + ("&preselectAuthMethod=NO_AUTH" if auth is False else "")
    return {
        "bolt_uri": f"bolt://{HOST}:{bolt_port}",
        "http_url": f"http://{HOST}:{http_port}" if http_port else None,
        "browser_url": f"http://{HOST}:{http_port}/browser/{query}" if http_port else None,
    }


def _status_from(state: dict, **extra: Any) -> dict:
    pid = state["pid"]
    rss = _rss_bytes(pid)
    result = {
        "running": True,
        "pid": pid,
        **_uris(state.get("bolt_port", DEFAULT_BOLT_PORT), state.get("http_port"), state.get("auth")),
        "auth": state.get("auth"),
        "data_dir": state.get("data_dir"),
        "log": state.get("log"),
        "neo4j_version": state.get("neo4j_version", NEO4J_VERSION),
        "rss_bytes": rss,
        "rss_mb": round(rss / 2**20, 1) if rss is not None else None,
    }
    result.update(extra)
    return result


def _ready_line(log: Path, offset: int) -> tuple[str | None, str | None]:
    """(ready line, failure line) printed by the launcher after byte offset in the log."""
    try:
        with open(log, "rb") as fh:
            fh.seek(offset)
            text = fh.read().decode("utf-8", "replace")
    except OSError:
        return None, None
    ready = failed = None
    for line in text.splitlines():
        if line.startswith(_READY):
            ready = line.strip()
        elif line.startswith(_FAILED):
            failed = line[len(_FAILED) :].strip()
    return ready, failed


def _failure_reason(log: Path, failed: str | None) -> str:
    """One line: the launcher's failure line plus Neo4j's last ERROR line, else the log's tail."""
    lines = _tail(log, 200)
    errors = [ln for ln in lines if " ERROR " in ln or ln.startswith(("Exception", "Error:"))]
    parts = [p for p in (failed, errors[-1].strip() if errors else None) if p]
    if not parts:
        parts = [" | ".join(ln.strip() for ln in lines[-6:]) or "no output"]
    return " | ".join(dict.fromkeys(parts))


def _terminate(pid: int, timeout: float) -> None:
    """SIGTERM, wait up to timeout, then SIGKILL the launcher's session; wait until gone."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if _alive(pid):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)  # the launcher leads its own session
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 15
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if _alive(pid):
            raise Neo4jServerError(f"Neo4j process {pid} did not exit after SIGKILL")
    child = _children.pop(pid, None)
    if child is not None:
        with contextlib.suppress(Exception):
            child.wait(timeout=5)
    # If another process started it, the exited JVM is a zombie until init reaps it (~1-2 s
    # here); wait for that so no <defunct> java is left behind (harmless if it takes longer).
    deadline = time.monotonic() + 5
    while _proc_state(pid) is not None and time.monotonic() < deadline:
        time.sleep(0.05)


# --------------------------------------------------------------------------- public API


def start(
    bolt_port: int = DEFAULT_BOLT_PORT,
    http_port: int | None = DEFAULT_HTTP_PORT,
    auth: bool = False,
    password: str | None = None,
    wait_seconds: float = 120,
    data_dir: str | os.PathLike | None = None,
    heap: str | None = None,
    pagecache: str | None = None,
) -> dict:
    """Start the local Neo4j server (building the launcher first if needed) and wait until ready.

    Returns {running, pid, bolt_uri, http_url, browser_url, auth, data_dir, log, neo4j_version,
    rss_bytes, rss_mb, started_seconds, already_running}. If this server is already running
    with the same ports and auth mode, returns its status (already_running=True).
    http_port=None or 0 disables HTTP (and the Browser). With auth=True the password (argument,
    else $GPUSTACK_NEO4J_PASSWORD) is set for user ``neo4j`` at every start; without one, an
    existing database keeps its password and a new one has Neo4j's default neo4j/neo4j (change
    required). heap/pagecache default to $GPUSTACK_NEO4J_HEAP or 1g / $GPUSTACK_NEO4J_PAGECACHE or 256m.
    """
    t0 = time.monotonic()
    http_port = http_port or None
    for name, port in (("bolt_port", bolt_port), ("http_port", http_port)):
        if port is not None and not (isinstance(port, int) and 0 < port < 65536):
            raise Neo4jServerError(f"{name} must be a port number 1-65535, got {port!r}")
    if bolt_port == http_port:
        raise Neo4jServerError(f"bolt_port and http_port must differ (both {bolt_port})")
    if auth and password is None:
        password = os.environ.get(PASSWORD_ENV) or None
    if auth and password is not None and len(password) < MIN_PASSWORD_LENGTH:
        raise Neo4jServerError(f"Neo4j passwords need at least {MIN_PASSWORD_LENGTH} characters")
    data = _data_dir(data_dir)
    heap = heap or os.environ.get("GPUSTACK_NEO4J_HEAP") or "1g"
    pagecache = pagecache or os.environ.get("GPUSTACK_NEO4J_PAGECACHE") or "256m"

    build = ensure_built()  # outside the start lock: may take minutes on first use
    with _locked("neo4j.lock", data):
        state = _read_state(data)
        if state is not None:
            same = (
                state.get("bolt_port") == bolt_port
                and state.get("http_port") == http_port
                and state.get("auth") == auth
            )
            if not same:
                raise Neo4jServerError(
                    f"Neo4j is already running on data directory {data} (pid {state['pid']}, bolt port "
                    f"{state.get('bolt_port')}, http port {state.get('http_port')}, auth "
                    f"{'on' if state.get('auth') else 'off'}); stop it first, or start another with --data-dir"
                )
            if _port_open(bolt_port):
                return _status_from(state, started_seconds=0.0, already_running=True)
            # Alive but Bolt is closed: a half-started or hung server. Replace it.
            _terminate(state["pid"], timeout=30)
            _clear_files(data)

        for port in (bolt_port, http_port):
            if port is not None and not _port_free(port):
                raise Neo4jServerError(f"port {port} on {HOST} is already in use by another process")

        java, _major = _find_java()
        log = _log_file(data)
        if log.exists():
            os.replace(log, log.with_name(log.name + ".1"))
        cmd = [
            java,
            f"-Xms{heap}",
            f"-Xmx{heap}",
            *_JVM_FLAGS,
            *shlex.split(os.environ.get("GPUSTACK_NEO4J_JVM_OPTS", "")),
            "-cp",
            f"{build / 'target' / 'classes'}{os.pathsep}{build / 'lib'}/*",
            _MAIN_CLASS,
            "--data-dir", str(data),
            "--bolt-port", str(bolt_port),
            "--http-port", str(http_port or 0),
            "--auth" if auth else "--no-auth",
            "--pagecache", pagecache,
            "--password-env", _LAUNCHER_PASSWORD_ENV,
            "--browser-files", str(BROWSER_FILES),
        ]  # fmt: skip
        env = dict(os.environ)
        env.pop(_LAUNCHER_PASSWORD_ENV, None)
        if auth and password is not None:
            env[_LAUNCHER_PASSWORD_ENV] = password  # not on the command line (ps would show it)
        with open(log, "wb") as out:
            try:
                proc = subprocess.Popen(
                    cmd,
                    cwd=data,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    close_fds=True,
                )
            except OSError as exc:
                raise Neo4jServerError(f"cannot start Java ({java}): {exc}") from None
        _children[proc.pid] = proc
        state = {
            "pid": proc.pid,
            "bolt_port": bolt_port,
            "http_port": http_port,
            "auth": auth,
            "data_dir": str(data),
            "log": str(log),
            "neo4j_version": NEO4J_VERSION,
            "build_dir": str(build),
            "started_at": time.time(),
        }
        _state_file(data).write_text(json.dumps(state, indent=1))
        _pid_file(data).write_text(f"{proc.pid}\n")

        deadline = t0 + wait_seconds
        while True:
            ready, failed = _ready_line(log, 0)
            if proc.poll() is not None or failed:
                with contextlib.suppress(Neo4jServerError):
                    _terminate(proc.pid, timeout=10)
                _clear_files(data)
                reason = _failure_reason(log, failed)
                raise Neo4jServerError(f"Neo4j failed to start (exit {proc.poll()}): {reason} (log: {log})")
            if ready and _port_open(bolt_port):
                break
            if time.monotonic() > deadline:
                with contextlib.suppress(Neo4jServerError):
                    _terminate(proc.pid, timeout=10)
                _clear_files(data)
                raise Neo4jServerError(f"Neo4j was not ready within {wait_seconds:g} s; log: {log}")
            time.sleep(0.2)
        return _status_from(state, started_seconds=round(time.monotonic() - t0, 2), already_running=False)


def _mib(size: str) -> int:
    """'1g' / '512m' / '1024k' -> MiB (for -Xms, capped by the caller)."""
    m = re.fullmatch(r"\s*(\d+)\s*([kKmMgGtT]?)\s*[bB]?\s*", size)
    if not m:
        raise Neo4jServerError(f"bad memory size {size!r} (use e.g. 512m or 1g)")
    n, unit = int(m.group(1)), m.group(2).lower()
    factor = {"": 1 / 2**20, "k": 1 / 1024, "m": 1, "g": 1024, "t": 1024**2}[unit]
    return max(1, int(n * factor))


def stop(timeout: float = 30, data_dir: str | os.PathLike | None = None) -> dict:
    """Stop the server of `data_dir` (default: the default data directory): SIGTERM, wait up to timeout
    seconds, then SIGKILL. Idempotent; servers of other data directories are left alone.

    Returns {stopped: bool (False if it was not running), pid, stop_seconds, data_dir}.
    """
    t0 = time.monotonic()
    data = _data_dir(data_dir)
    if not data.is_dir():
        return {"stopped": False, "pid": None, "stop_seconds": 0.0, "data_dir": str(data)}
    with _locked("neo4j.lock", data):
        state = _read_state(data)
        if state is None:
            _clear_files(data)
            return {"stopped": False, "pid": None, "stop_seconds": 0.0, "data_dir": str(data)}
        _terminate(state["pid"], timeout=timeout)
        _clear_files(data)
        return {"stopped": True, "pid": state["pid"], "stop_seconds": round(time.monotonic() - t0, 2),
                "data_dir": str(data)}


def status(data_dir: str | os.PathLike | None = None) -> dict:
    """{running, pid, bolt_uri, http_url, browser_url, auth, data_dir, log, neo4j_version, rss_bytes, rss_mb}
    of the server of `data_dir` (default: the default data directory).

    When not running, pid/rss are None and the URIs are the defaults.
    """
    data = _data_dir(data_dir)
    state = _read_state(data) if data.is_dir() else None
    if state is not None:
        return _status_from(state, bolt_open=_port_open(state.get("bolt_port", DEFAULT_BOLT_PORT)))
    return {
        "running": False,
        "pid": None,
        **_uris(DEFAULT_BOLT_PORT, DEFAULT_HTTP_PORT),
        "auth": None,
        "data_dir": str(data),
        "log": str(_log_file(data)),
        "neo4j_version": NEO4J_VERSION,
        "rss_bytes": None,
        "rss_mb": None,
        "bolt_open": False,
    }
