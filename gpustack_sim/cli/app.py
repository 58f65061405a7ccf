"""The root `gpustack` app: global options, how results are printed, and how a command gets its engine.

JSON alone goes to stdout with `--json`; messages and errors go to stderr. Exceptions become exit
codes in `main.py`, the one place that maps them.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from gpustack_compiler.base.errors import InputError
from gpustack_compiler.base.limits import MAX_REPLICATIONS

if TYPE_CHECKING:
    from gpustack_compiler.manifest.source import GraphSource

    from ..api import Engine

# main.py maps exceptions to these; a command whose answer is itself a state (neo4j status) exits with one.
EXIT_OK, EXIT_FINDINGS, EXIT_USAGE, EXIT_INFRA = 0, 1, 2, 3

app = typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_show_locals=False,
                  help="gpustack: what a token of AI training physically costs, and what that number is made of.")

JsonOpt = typer.Option(False, "--json", help="Print JSON alone on stdout.")
Neo4jOpt = typer.Option(False, "--neo4j", help="Answer from Neo4j (NEO4J_URI etc.) instead of the manifest.")


def seed_option(default: int | None = 0, help: str = "Random seed (same seed, same output).") -> typer.Option:
    """`--seed` on every command that draws: numpy seeds with non-negative integers, so a negative one is a usage
    error here, before any work."""
    return typer.Option(default, "--seed", min=0, help=help)


def replications_option(default: int | None, help: str) -> typer.Option:
    """`--replications` on every command that replays: bounded by MAX_REPLICATIONS before any work."""
    return typer.Option(default, "--replications", min=1, max=MAX_REPLICATIONS, help=help)


AllowViolationsOpt = typer.Option(False, "--allow-violations", help="Compute with assigned values outside their "
                                  "variables' catalog assumptions or bounds (listed as violated) instead of exit 1.")


@dataclass
class Settings:
    catalog: Path
    build: Path
    schemas: Path


@app.callback()
def _settings(ctx: typer.Context,
              catalog: Path = typer.Option(None, "--catalog", envvar="GPUSTACK_CATALOG",
                                           help="Catalog directory (default: ./catalog)."),
              build_dir: Path = typer.Option(Path("build"), "--build-dir", envvar="GPUSTACK_BUILD_DIR",
                                             help="Where the manifest and caches go.")) -> None:
    from ..compiled import default_catalog

    cat = catalog or default_catalog()
    ctx.obj = Settings(cat, build_dir, cat.resolve().parent / "schemas")


def settings(ctx: typer.Context) -> Settings:
    return ctx.find_root().obj


def catalog_dir(ctx: typer.Context) -> Path:
    """The catalog directory, for commands that read it without the engine (which checks it itself)."""
    cat = settings(ctx).catalog
    if not cat.is_dir():
        raise InputError(f"catalog directory {cat} not found", "pass --catalog PATH")
    return cat


def json_text(data) -> str:
    """`data` as JSON: a number that is not finite (NaN, inf) becomes null, so the text is always valid JSON
    (json.dumps would write the bare `NaN` no JSON parser accepts)."""
    return json.dumps(_finite(data), indent=2, sort_keys=True, default=str, allow_nan=False) + "\n"


def _finite(data):
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if isinstance(data, dict):
        return {k: _finite(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [_finite(v) for v in data]
    return data


def out(data, text: str, as_json: bool) -> None:
    if as_json:
        sys.stdout.write(json_text(data))
    else:
        sys.stdout.write(text + ("\n" if text and not text.endswith("\n") else ""))


def err(text: str) -> None:
    sys.stderr.write(text + "\n")


def engine(ctx: typer.Context, use_neo4j: bool = False, allow_violations: bool = False) -> Engine:
    """The engine over the compiled catalog, or over the graph in Neo4j alone (no catalog read)."""
    from ..api import Engine

    if use_neo4j:
        return Engine.from_neo4j().allowing_violations(allow_violations)
    s = settings(ctx)
    eng = Engine.open(s.catalog, s.build)
    ctx.call_on_close(eng.keep_parsed)
    return eng.allowing_violations(allow_violations)


def source(ctx: typer.Context, use_neo4j: bool) -> GraphSource:
    """The graph alone (no resolver): for commands that only read names, cones and statistics."""
    if use_neo4j:
        from gpustack_compiler.neo4j.source import Neo4jSource

        return Neo4jSource.from_env()
    from gpustack_compiler.manifest.source import ManifestSource

    from ..compiled import compile_catalog

    s = settings(ctx)
    return ManifestSource(compile_catalog(s.catalog, s.build).manifest)


def pairs(items: Sequence[str], flag: str, example: str = "NAME=VALUE") -> dict[str, str]:
    """`NAME=VALUE` option values as a mapping: the one place where such text is split."""
    result = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip() or not value.strip():
            raise InputError(f"{flag} {item!r}: expected {example}")
        result[name.strip()] = value.strip()
    return result
