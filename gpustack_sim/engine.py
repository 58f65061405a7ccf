"""What every engine command starts from: the compiled manifest (presets, units), a graph source
(the manifest itself, or Neo4j) and a resolver over it."""

from __future__ import annotations

import typer

from gpustack_compiler.cli import compile_or_fail, settings
from gpustack_compiler.errors import UsageError
from gpustack_compiler.source import GraphSource, ManifestSource
from gpustack_compiler.suggest import did_you_mean
from gpustack_compiler.units import UnitSystem

from .resolver import Resolver
from .scenario import ScenarioBuilder


class Engine:
    """The manifest (presets, units) plus a graph source (the manifest itself, or Neo4j)."""

    def __init__(self, ctx: typer.Context, use_neo4j: bool):
        self.manifest = compile_or_fail(settings(ctx)).manifest
        if use_neo4j:
            from gpustack_compiler.neo4j_source import Neo4jSource

            self.source: GraphSource = Neo4jSource.from_env()
        else:
            self.source = ManifestSource(self.manifest)
        self.scenarios = ScenarioBuilder(self.manifest)
        self.resolver = Resolver(self.source, UnitSystem.from_manifest(self.manifest["units"]))

    def require_variable(self, name: str) -> None:
        if name not in self.manifest["variables"]:
            raise UsageError(f"unknown variable `{name}`", did_you_mean(name, self.manifest["variables"]))
