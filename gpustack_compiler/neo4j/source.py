"""The graph source that answers from Neo4j with the fixed Cypher of `queries/`.

Same protocol and the same answers as `ManifestSource` (tests hold them to it): records come back
as the manifest's own JSON (stored on each node as `record`), the tables (units, presets, variant
keys, ...) from the `:Table` nodes, so no catalog is needed; cones and root debt are computed by
Cypher in the database.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from gpustack_compiler.base.errors import InfrastructureError, InputError
from gpustack_compiler.manifest.graph import FamilyDebt, RootDebt
from gpustack_compiler.manifest.records import ConstantRecord, VariableRecord

from .conn import Neo4jSettings, driver, query, relation_kind_labels, translate

HEAVIEST = 3  # roots named per family, as in CatalogGraph.family_debt


class Neo4jSource:
    def __init__(self, settings: Neo4jSettings | None = None):
        self.settings = settings or Neo4jSettings.resolve()
        self._driver = None
        self._session = None
        self._build: dict | None = None
        self._tables: dict | None = None

    @classmethod
    def from_env(cls, uri: str | None = None, user: str | None = None, password: str | None = None,
                 database: str | None = None) -> Neo4jSource:
        """NEO4J_URI / NEO4J_USER / NEO4J_PASSWORD / NEO4J_DATABASE, unless given explicitly."""
        return cls(Neo4jSettings.resolve(uri, user, password, database))

    # ---- plumbing ----------------------------------------------------------------------------
    def close(self) -> None:
        if self._session is not None:
            self._session.close()
            self._session = None
        if self._driver is not None:
            self._driver.close()
            self._driver = None

    def __enter__(self) -> Neo4jSource:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _raw(self, query_name: str, **params) -> list:
        """Run one fixed query (auto-commit, read access) on this source's session (one session, reused:
        half the cost of a session per query; not for use from several threads at once)."""
        import neo4j

        with translate(self.settings, "reading"):
            if self._driver is None:
                self._driver = driver(self.settings)
            if self._session is None:
                self._session = self._driver.session(database=self.settings.database,
                                                     default_access_mode=neo4j.READ_ACCESS)
            try:
                return list(self._session.run(query(query_name), params))
            except BaseException:
                self._session.close()
                self._session = None
                raise

    def build(self) -> dict:
        """The Build node of the graph in the database; InfrastructureError if there is none."""
        if self._build is None:
            rows = self._raw("build")
            if not rows:
                raise InfrastructureError(f"Neo4j at {self.settings.where} holds no gpustack graph",
                                          "load one with `gpustack compile --neo4j`")
            self._build = dict(rows[0]["build"])
        return self._build

    def _run(self, query_name: str, **params) -> list:
        self.build()
        return self._raw(query_name, **params)

    def _record(self, query_name: str, name: str) -> dict | None:
        rows = self._run(query_name, name=name)
        return json.loads(rows[0]["record"]) if rows else None

    # ---- GraphSource -------------------------------------------------------------------------
    def tables(self) -> dict:
        """The manifest's tables (units, presets, variant keys, ...) as the compile stored them; read once."""
        if self._tables is None:
            rows = self._run("tables")
            if not rows:
                raise InfrastructureError(f"the gpustack graph in Neo4j at {self.settings.where} holds no tables "
                                          "(loaded by an older gpustack)", "reload it with `gpustack compile --neo4j`")
            self._tables = {r["name"]: json.loads(r["json"]) for r in rows}
        return self._tables

    def names(self) -> list[str]:
        return sorted(r["name"] for r in self._run("names"))

    def variable(self, name: str) -> VariableRecord | None:
        record = self._record("variable", name)
        return None if record is None else VariableRecord.parse(record)

    def variables(self, names: Iterable[str]) -> dict[str, VariableRecord]:
        return {r["name"]: VariableRecord.parse(json.loads(r["record"]))
                for r in self._run("variables", names=list(names))}

    def relation(self, name: str) -> dict | None:
        return self._record("relation", name)

    def constant(self, name: str) -> ConstantRecord | None:
        record = self._record("constant", name)
        return None if record is None else ConstantRecord.parse(record)

    def _require(self, name: str) -> None:
        if not self._run("exists", name=name)[0]["found"]:
            raise InputError(f"unknown name `{name}`")

    def cone(self, name: str, upstream: bool = True, depth: int | None = None) -> dict[str, int]:
        """Variables and constants reachable from `name`, with the fewest relations crossed."""
        rows = self._run("cone_upstream" if upstream else "cone_downstream", name=name, depth=depth)
        if not rows:  # unknown name (or depth 0, where every row is filtered out)
            self._require(name)
            return {}
        return dict(zip(rows[0]["names"], rows[0]["depths"]))

    def root_debt(self, system: str | None = None) -> list[RootDebt]:
        return [RootDebt(r["name"], r["family"], r["category"], r["weight"])
                for r in self._run("root_debt", system=system)]

    def family_debt(self, system: str | None = None) -> list[FamilyDebt]:
        return [FamilyDebt(r["family"], r["weight"], r["roots"], tuple(r["heaviest"]))
                for r in self._run("family_debt", system=system, top=HEAVIEST)]

    def stats(self) -> dict:
        """Counts from Cypher over the stored compile statistics (coverage, cycles, headline cone)."""
        tables = self.tables()
        stored = tables.get("stats") or {}
        live = self._run("stats")[0]
        kinds = dict(live["by_kind"])
        order = list(stored.get("relations_by_kind") or relation_kind_labels())
        st = {**stored,
              "systems": live["systems"], "variables": live["variables"], "constants": live["constants"],
              "relations": live["relations"], "relations_by_kind": {k: kinds.get(k, 0) for k in order},
              "root_inputs": live["root_inputs"], "leaves": live["leaves"], "references": live["references"],
              "presets": len(tables.get("presets") or {})}
        by_system = {k: dict(v) for k, v in stored.get("by_system", {}).items()}
        for row in live["by_system"]:
            by_system.setdefault(row["system"], {}).update(
                variables=row["variables"], relations=row["relations"], roots=row["roots"])
        st["by_system"] = by_system
        return st

    def relations_defining(self, names: list[str]) -> list[dict]:
        """Value-defining relations whose output is one of `names`, by name."""
        return [json.loads(r["record"]) for r in self._run("relations_defining", names=list(names))]

    def subgraph(self, target: str) -> dict:
        """What the resolver needs for `target` (see ManifestSource.subgraph)."""
        rows = self._run("subgraph", name=target)
        if not rows:
            raise InputError(f"unknown name `{target}`")
        row = rows[0]

        def by_name(records: list[str], typed=lambda x: x) -> dict:
            items = [json.loads(r) for r in records]
            return {x["name"]: typed(x) for x in sorted(items, key=lambda x: x["name"])}

        return {"target": target, "variables": by_name(row["variables"], VariableRecord.parse),
                "constants": by_name(row["constants"], ConstantRecord.parse), "relations": by_name(row["relations"])}
