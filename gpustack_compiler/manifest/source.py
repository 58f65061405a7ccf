"""The one small interface through which commands and the engine read the compiled graph.

Two implementations answer it: the manifest in memory (networkx, the embedded default) and Neo4j
(`gpustack_compiler/neo4j/source.py`). Tests hold them to identical answers.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Protocol

from gpustack_compiler.base.errors import InputError
from gpustack_compiler.base.suggest import did_you_mean

from . import serialise as mf
from .records import ConstantRecord, VariableRecord

if TYPE_CHECKING:  # networkx and the pydantic models stay unimported until a graph is built
    from .graph import CatalogGraph, FamilyDebt, RootDebt


class GraphSource(Protocol):
    def names(self) -> list[str]: ...
    def variable(self, name: str) -> VariableRecord | None: ...
    def variables(self, names: Iterable[str]) -> dict[str, VariableRecord]: ...
    def relation(self, name: str) -> dict | None: ...
    def constant(self, name: str) -> ConstantRecord | None: ...
    def cone(self, name: str, upstream: bool = True, depth: int | None = None) -> dict[str, int]: ...
    def root_debt(self, system: str | None = None) -> list[RootDebt]: ...
    def family_debt(self, system: str | None = None) -> list[FamilyDebt]: ...
    def stats(self) -> dict: ...
    def subgraph(self, target: str) -> dict: ...
    def relations_defining(self, names: list[str]) -> list[dict]: ...
    def tables(self) -> dict: ...


def root_meta(variables: dict, system: str | None) -> dict[str, tuple[str | None, str | None]]:
    return {n: ((v.get("root") or {}).get("family"), (v.get("root") or {}).get("category"))
            for n, v in variables.items() if v["is_root"] and (system is None or v["system"] == system)}


# What the graph is made of; everything else in the manifest (units, presets, ...) is a table.
GRAPH_PARTS = frozenset({"variables", "constants", "relations", "edges"})


class ManifestSource:
    def __init__(self, manifest: dict):
        self.manifest = manifest
        self.graph: CatalogGraph = mf.graph_of(manifest)
        self._touching: dict[str, list[str]] | None = None
        self._variables: dict[str, VariableRecord] = {}

    def tables(self) -> dict:
        """The manifest's tables: units, presets, variant keys, systems, references, statistics."""
        return {k: v for k, v in self.manifest.items() if k not in GRAPH_PARTS}

    def names(self) -> list[str]:
        m = self.manifest
        return sorted([*m["variables"], *m["constants"], *m["relations"]])

    def variable(self, name: str) -> VariableRecord | None:
        record = self._variables.get(name)
        if record is None and name in self.manifest["variables"]:
            record = self._variables[name] = VariableRecord.parse(self.manifest["variables"][name])
        return record

    def variables(self, names: Iterable[str]) -> dict[str, VariableRecord]:
        """The records of those of `names` that are variables, in one call (one query for Neo4j)."""
        return {n: record for n in names if (record := self.variable(n)) is not None}

    def relation(self, name: str) -> dict | None:
        return self.manifest["relations"].get(name)

    def constant(self, name: str) -> ConstantRecord | None:
        record = self.manifest["constants"].get(name)
        return None if record is None else ConstantRecord.parse(record)

    def cone(self, name: str, upstream: bool = True, depth: int | None = None) -> dict[str, int]:
        try:
            return self.graph.cone(name, upstream, depth)
        except KeyError:
            raise InputError(f"unknown name `{name}`", did_you_mean(name, self.names())) from None

    def root_debt(self, system: str | None = None) -> list[RootDebt]:
        return self.graph.root_debt(root_meta(self.manifest["variables"], system))

    def family_debt(self, system: str | None = None) -> list[FamilyDebt]:
        return self.graph.family_debt(root_meta(self.manifest["variables"], system))

    def stats(self) -> dict:
        if self.manifest.get("stats"):
            return self.manifest["stats"]
        from .stats import compute_stats

        return compute_stats(self.manifest, self.graph)

    def relations_defining(self, names: list[str]) -> list[dict]:
        """Value-defining relations whose output is one of `names`, by name."""
        wanted = set(names)
        return [r for _, r in sorted(self.manifest["relations"].items()) if r.get("defines") in wanted]

    def subgraph(self, target: str) -> dict:
        """What the resolver needs for `target`: its upstream cone with every relation that defines a
        variable in it, and the constraints that touch it."""
        m = self.manifest
        names = set(self.graph.cone(target, upstream=True)) | {target}
        variables = {n: self.variable(n) for n in sorted(names) if n in m["variables"]}
        constants = {n: self.constant(n) for n in sorted(names) if n in m["constants"]}
        touching = self._relations_touching()
        wanted = {r for n in names for r in touching.get(n, ())}
        relations = {name: m["relations"][name] for name in sorted(wanted)}
        return {"target": target, "variables": variables, "constants": constants, "relations": relations}

    def _relations_touching(self) -> dict[str, list[str]]:
        """Per variable, the relations defining it and the constraints on it (an estimate asks for
        dozens of subgraphs; scanning every relation for each was a tenth of its resolution time)."""
        if self._touching is None:
            self._touching = {}
            for name, rel in self.manifest["relations"].items():
                for var in rel["constrains"] if rel["kind"] == "constraint" else [rel["defines"]]:
                    self._touching.setdefault(var, []).append(name)
        return self._touching
