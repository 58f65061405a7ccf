"""What the layers above the engine take from it: the resolver, the scenario builder and the catalog's facts
over one graph source. `Engine` (api.py) is the public facade around one; the analyses and the datacenter
take the context, so none of them reaches back up to the facade."""

from __future__ import annotations

from dataclasses import dataclass

from gpustack_compiler.language.units import UnitSystem
from gpustack_compiler.manifest.records import Tables
from gpustack_compiler.manifest.source import GraphSource

from .cache import ParsedRelations
from .facts import Facts
from .resolver import Resolver
from .run import RunSpec
from .scenario import Scenario, ScenarioBuilder
from .serve_run import ServeRunSpec


@dataclass(frozen=True)
class EngineContext:
    source: GraphSource
    tables: Tables
    units: UnitSystem
    facts: Facts
    scenarios: ScenarioBuilder
    resolver: Resolver

    @classmethod
    def over(cls, source: GraphSource, parsed: ParsedRelations | None = None) -> EngineContext:
        tables = Tables.parse(source.tables())
        units = UnitSystem.from_manifest(tables.units)
        return cls(source, tables, units, Facts(tables), ScenarioBuilder(source, tables, units),
                   Resolver(source, units, parsed if parsed is not None else ParsedRelations()))

    def run_scenario(self, run: RunSpec | ServeRunSpec) -> Scenario:
        """The scenario a run file describes, through the catalog's run-field (or serving-field) bindings."""
        return self.facts.fields_for(run).scenario(self.scenarios, run)
