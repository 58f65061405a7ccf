"""Connecting to Neo4j: settings from options or the environment, the fixed Cypher files, and the
one place where driver exceptions become `InfrastructureError` (exit 3) with a message naming the URI.

Only auto-commit queries and explicit transactions are used (never the driver's managed, retrying
transactions), so an unreachable server fails within the connection timeout instead of retrying
for half a minute.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from importlib import resources

from gpustack_compiler.base.errors import InfrastructureError, InputError

DEFAULT_URI = "bolt://127.0.0.1:7687"
DEFAULT_USER = "neo4j"
SCHEMES = ("bolt", "bolt+s", "bolt+ssc", "neo4j", "neo4j+s", "neo4j+ssc")
CONNECT_TIMEOUT = 3.0  # seconds for TCP connect + Bolt handshake
ACQUIRE_TIMEOUT = 5.0  # seconds for a connection from the pool, all included: well under the 10 s promised

# The driver logs (connection failures, server notifications) through `logging`; without a handler
# Python's last-resort handler would print them on stderr next to our one-line error.
logging.getLogger("neo4j").addHandler(logging.NullHandler())

MARKER = "gpustack_load"  # property on every node and relationship the compiler writes


@cache
def relation_kind_labels() -> dict[str, str]:
    """Relation kind -> its label in Neo4j (the kind's name capitalised: `identity` -> `:Identity`), in the
    catalog's order of kinds. From the file models, not the kinds' modules: those carry sympy, a second
    of imports that a load has no use for."""
    from gpustack_compiler.language.models import RELATION_KINDS

    return {name: name.capitalize() for name in RELATION_KINDS}


@dataclass(frozen=True)
class Neo4jSettings:
    uri: str = DEFAULT_URI
    user: str = DEFAULT_USER
    password: str | None = None
    database: str | None = None  # None: the server's default database

    @classmethod
    def resolve(cls, uri: str | None = None, user: str | None = None, password: str | None = None,
                database: str | None = None) -> Neo4jSettings:
        """Explicit values first, then NEO4J_URI / NEO4J_USER / NEO4J_PASSWORD / NEO4J_DATABASE."""
        env = os.environ
        return cls(uri=uri or env.get("NEO4J_URI") or DEFAULT_URI,
                   user=user or env.get("NEO4J_USER") or DEFAULT_USER,
                   password=password if password is not None else (env.get("NEO4J_PASSWORD") or None),
                   database=database or env.get("NEO4J_DATABASE") or None)

    @property
    def where(self) -> str:
        return self.uri + (f" (database {self.database})" if self.database else "")


def driver(settings: Neo4jSettings):
    import neo4j

    auth = (settings.user, settings.password) if settings.password is not None else None
    scheme = settings.uri.split("://", 1)[0].lower() if "://" in settings.uri else ""
    if scheme not in SCHEMES:
        raise InputError(f"bad Neo4j URI {settings.uri!r}", "use bolt://HOST:PORT or neo4j://HOST:PORT")
    try:
        return neo4j.GraphDatabase.driver(
            settings.uri, auth=auth, connection_timeout=CONNECT_TIMEOUT,
            connection_acquisition_timeout=ACQUIRE_TIMEOUT, max_connection_lifetime=3600,
            notifications_min_severity="OFF", user_agent="gpustack")
    except (ValueError, neo4j.exceptions.ConfigurationError) as exc:
        raise InputError(f"bad Neo4j URI {settings.uri!r}: {exc}",
                         "use bolt://HOST:PORT or neo4j://HOST:PORT") from None


@contextlib.contextmanager
def translate(settings: Neo4jSettings, doing: str = "talking to") -> Iterator[None]:
    """Driver exceptions -> InfrastructureError with one line naming the URI."""
    from neo4j import exceptions as ne

    try:
        yield
    except ne.AuthError as exc:
        if settings.password is None:
            raise InfrastructureError(
                f"Neo4j at {settings.uri} requires a user and password ({_short(exc)})",
                "set NEO4J_USER and NEO4J_PASSWORD, or pass --user/--password") from None
        raise InfrastructureError(
            f"Neo4j at {settings.uri} rejected user `{settings.user}`: wrong user name or password "
            f"({_short(exc)})", "check NEO4J_USER / NEO4J_PASSWORD") from None
    except (ne.ServiceUnavailable, ne.SessionExpired, OSError) as exc:
        raise InfrastructureError(f"cannot reach Neo4j at {settings.uri}: {_reason(exc)}",
                                  "start it with `gpustack neo4j start` or set NEO4J_URI") from None
    except ne.ClientError as exc:
        if exc.code and "DatabaseNotFound" in exc.code:
            raise InfrastructureError(f"Neo4j at {settings.uri} has no database `{settings.database}`",
                                      "set NEO4J_DATABASE or --database to an existing one") from None
        raise InfrastructureError(f"Neo4j at {settings.where} refused a query while {doing} it: "
                                  f"{_short(exc)}") from None
    except ne.Neo4jError as exc:
        raise InfrastructureError(f"Neo4j at {settings.where} failed while {doing} it: {_short(exc)}") from None
    except ne.DriverError as exc:
        raise InfrastructureError(f"Neo4j driver error for {settings.uri}: {_short(exc)}") from None


def _reason(exc: BaseException) -> str:
    """The useful end of a connection failure (`connection refused`, `timed out`, ...)."""
    text = _short(exc)
    if "looks like HTTP" in text:
        return "that port speaks HTTP, not Bolt (Neo4j's Bolt port is usually 7687)"
    if "handshake" in text.lower() and ("deadline" in text.lower() or "timed out" in text.lower()):
        return f"no Bolt handshake within {ACQUIRE_TIMEOUT:g} s"
    m = re.search(r"\[Errno -?\d+\] ([^)\]]+)", text) or re.search(r"\(reason ([^)]+)\)", text)
    if m:
        return m.group(1).strip().lower()
    if "timed out" in text.lower():
        return "timed out"
    return text


def _short(exc: BaseException) -> str:
    text = getattr(exc, "message", None) or str(exc) or type(exc).__name__
    return re.sub(r"\s+", " ", str(text)).strip()[:300]


# ---- the fixed Cypher ------------------------------------------------------------------------

@cache
def query(name: str) -> str:
    """A query from `gpustack_compiler/neo4j/queries/<name>.cypher` (comments kept: Neo4j ignores them)."""
    return resources.files(__package__).joinpath("queries", f"{name}.cypher").read_text(encoding="utf-8")


def statements(name: str) -> list[str]:
    """The `;`-separated statements of a .cypher file (for files holding several, like the schema)."""
    text = "\n".join(line for line in query(name).splitlines() if not line.lstrip().startswith("//"))
    return [s.strip() for s in text.split(";") if s.strip()]
