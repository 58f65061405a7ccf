"""Load a compiled manifest into Neo4j, replacing the previous graph as one unit.

Graph model (data flows along the arrows)::

    (:Variable|:Constant)-[:FEEDS]->(:Relation:<Kind>)-[:DEFINES]->(:Variable)
    (:Relation:Constraint)-[:CONSTRAINS]->(:Variable|:Constant)
    (:Variable|:Relation)-[:IN_SYSTEM]->(:System)
    (:Variable|:Relation|:Constant)-[:CITES]->(:Reference)
    (:Preset)-[:ASSIGNS {value, units, sd, ...}]->(:Variable)   for Browser (the engine reads the table)
    (:Build {manifest_hash, catalog_hash, compiled_at, catalog_commit, ...})   one per compile
    (:Table {name, json})   every other top-level part of the manifest (units, presets, variant keys, ...)

plus, on variables, the labels `:Root` and `:Leaf`, `:Sys_<system>` (the Browser style colours by system)
and on roots `:Debt1`, `:Debt10` or `:Debt100` (root debt, the number of variables downstream, at least
1, 10 or 100: GraSS sizes by label, not by property), and the properties `short` (the name without
its system prefix) and `root_debt`. Every node carries the marker property `gpustack_load`, a digest
of what the compile wrote into it (its labels, its properties and its outgoing relationships); nodes
without it are foreign. A relationship carries it only when it has properties (an assignment's value):
the tens of thousands without any would each store the same digest, and an edge drawn by hand changes
its source node's degree, so the load finds it anyway. The Build node's marker is the id of the compile.

The tables make the graph a complete source: the engine reads them back (Neo4jSource.tables) instead
of compiling a catalog. They are stored whole, by top-level key, so a part added to the manifest
later is loaded without a change here.

Atomicity: constraints and indexes are created first when missing (schema changes cannot share a
transaction with data). Then ONE explicit transaction reads the digests of the nodes the graph holds,
creates the nodes that are new and rewrites those whose digest (or labels, property count or degree,
which an edit by hand changes) differs, diffs the outgoing relationships of the rewritten nodes only,
deletes what this compile does not write (renamed or removed entries, the old Build, edges drawn by
hand), creates the new Build node, checks the counts, and commits. A recompile after a small edit
therefore writes a few rows, not the graph. Statements run in batches (`UNWIND $rows AS row ...`),
labels and relationship types are parameters (dynamic labels), nodes and relationships are
addressed by element id. Readers see the old graph until the commit; if the process fails or is
killed before it, the server rolls the transaction back and the old graph stays as it was
(tests/test_neo4j_load.py SIGKILLs a load in flight to show it).
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import json
import re
import subprocess
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from gpustack_compiler.base.errors import InfrastructureError, InputError
from gpustack_compiler.manifest import serialise as mf
from gpustack_compiler.manifest.source import GRAPH_PARTS, root_meta

from .conn import MARKER, Neo4jSettings, driver, query, relation_kind_labels, statements, translate

BATCH_SIZE = 2000
Progress = Callable[[str, int, int], None]  # (step, rows done in this step, rows in this step)


class LoadError(Exception):
    """The manifest cannot be loaded as it is (an edge to a missing node, a count that does not add up)."""


@dataclass
class Plan:
    """What one compile writes, as parameter rows, built without touching the database.

    Every row's `props` carries its digest under MARKER: the load compares it with the graph's to
    decide what to write."""

    load: str
    nodes: list[tuple[str, list[dict]]] = field(default_factory=list)  # (label, [{name, labels, props}])
    edges: list[tuple[str, list[tuple]]] = field(default_factory=list)  # (type, [((label, name), (label, name), props)])
    build: dict = field(default_factory=dict)

    @property
    def node_count(self) -> int:
        return sum(len(rows) for _, rows in self.nodes) + 1

    @property
    def edge_count(self) -> int:
        return sum(len(rows) for _, rows in self.edges)


def dimension_text(dim: dict, order: list[str] | None = None) -> str:
    """`{"currency": "1", "token": "-1"}` -> `currency token^-1`; dimensionless -> `1`.

    Base dimensions in the catalog's order (`order`), the rest alphabetically: the text must not
    depend on the key order of the manifest dict (a manifest read back from JSON has sorted keys)."""
    rank = {name: i for i, name in enumerate(order or [])}
    keys = sorted(dim, key=lambda k: (rank.get(k, len(rank)), k))
    return " ".join(k if str(dim[k]) == "1" else f"{k}^{dim[k]}" for k in keys) or "1"


def _clean(props: dict) -> dict:
    """Neo4j properties: no nulls (absent instead), no maps (JSON text instead)."""
    out = {}
    for k, v in props.items():
        kind = type(v)
        if v is None:
            continue
        if kind is dict:
            v = json.dumps(v, sort_keys=True, ensure_ascii=False)
        elif kind is list or kind is tuple:
            if any(x is None or type(x) in _NESTED for x in v):
                v = json.dumps(v, sort_keys=True, ensure_ascii=False)
            elif kind is tuple:
                v = list(v)
        out[k] = v
    return out


_NESTED = (dict, list, tuple)


def _record(rec: object) -> str:
    return json.dumps(rec, sort_keys=True, ensure_ascii=False)


def _digest(props: dict, *also: object) -> str:
    """Properties hold only strings, numbers, booleans and lists of them (see _clean), whose repr is
    exact and stable: cheaper than JSON for the same result. Their order is the fixed order `plan`
    writes them in, so they need no sorting (another gpustack version may order them differently: its
    loads then rewrite the nodes once). The record (the longest text) is hashed as it is, not through repr."""
    small = [item for item in props.items() if item[0] != "record"]
    h = hashlib.blake2b(repr((small, also)).encode(), digest_size=16)
    h.update(props.get("record", "").encode())
    return h.hexdigest()


def _node(name: str, labels: list[str], props: dict) -> dict:
    """A node's row: its labels (the first is its kind of node) and its properties; `plan` sets the
    marker once the node's outgoing relationships are known."""
    return {"name": name, "labels": labels, "props": props}


NO_PROPS: dict = {}  # most relationships: no properties, no marker (see the module's docstring)


def _expression_text(rel: dict) -> str:
    parts = rel.get("parts") or {}
    if set(parts) == {"expression"}:
        return parts["expression"]
    return "; ".join(f"{k}: {v}" for k, v in parts.items())


DEBT_STEPS = (100, 10, 1)


def extra_labels(variable: dict, root_debt: int | None) -> list[str]:
    """The labels a variable carries besides `:Variable`: the Browser style's selectors."""
    labels = [label for label, flag in (("Root", "is_root"), ("Leaf", "is_leaf")) if variable.get(flag)]
    if variable.get("system"):
        labels.append(f"Sys_{variable['system']}")
    step = next((s for s in DEBT_STEPS if (root_debt or 0) >= s), None)
    if variable.get("is_root") and step:
        labels.append(f"Debt{step}")
    return labels


def plan(manifest: dict, build: dict | None = None, load: str | None = None) -> Plan:
    """Parameter rows for every statement of the load; raises LoadError on a dangling edge."""
    load = load or uuid.uuid4().hex
    p = Plan(load)
    variables, constants, relations = manifest["variables"], manifest["constants"], manifest["relations"]
    references, systems = manifest.get("references", {}), manifest.get("systems", {})
    order = [d["name"] for d in (manifest.get("units") or {}).get("base_dimensions", [])]

    p.nodes.append(("System", [_node(n, ["System"], _clean({**s, "name": n})) for n, s in sorted(systems.items())]))
    p.nodes.append(("Reference", [_node(k, ["Reference"], _clean({**r, "name": k, "key": k}))
                                  for k, r in sorted(references.items())]))
    prefixes = {name: s.get("prefix") for name, s in systems.items()}
    debt = {r.name: r.weight for r in mf.graph_of(manifest).root_debt(root_meta(variables, None))}
    var_rows = []
    for n, v in sorted(variables.items()):
        root = v.get("root") or {}
        prefix = prefixes.get(v.get("system"))
        var_rows.append(_node(n, ["Variable", *extra_labels(v, debt.get(n))], _clean({
            "name": n, "short": n[len(prefix) + 1:] if prefix and n.startswith(prefix + ".") else n,
            "root_debt": debt.get(n), "system": v.get("system"), "units": v.get("units"), "scale": v.get("scale"),
            "dimension": dimension_text(v.get("dimension") or {}, order), "description": v.get("description"),
            "symbol": v.get("symbol"), "quantity": v.get("quantity"), "assumptions": v.get("assumptions") or [],
            "bounds": v.get("bounds"), "references": v.get("references") or [], "is_root": bool(v.get("is_root")),
            "is_leaf": bool(v.get("is_leaf")), "family": root.get("family"), "category": root.get("category"),
            "root_note": root.get("note"), "file": v.get("file"), "line": v.get("line"),
            "record": _record(v)})))
    p.nodes.append(("Variable", var_rows))
    presets = manifest.get("presets", {})
    p.nodes.append(("Preset", [_node(n, ["Preset"], _clean({
        "name": n, "description": x.get("description"), "provenance": x.get("provenance"), "source": x.get("source"),
        "variants": x.get("variants"), "modes": x.get("modes"), "targets": x.get("targets"),
        "references": x.get("references") or [], "file": x.get("file"), "line": x.get("line")}))
        for n, x in sorted(presets.items())]))
    p.nodes.append(("Constant", [_node(n, ["Constant"], _clean({
        "name": n, "value": c.get("value"), "units": c.get("units"), "si_value": c.get("si_value"),
        "dimension": dimension_text(c.get("dimension") or {}, order), "description": c.get("description"),
        "symbol": c.get("symbol"), "exact": c.get("exact"), "references": c.get("references") or [],
        "file": c.get("file"), "line": c.get("line"), "record": _record(c)}))
        for n, c in sorted(constants.items())]))
    relation_rows = []
    for n, r in sorted(relations.items()):
        label = relation_kind_labels().get(r.get("kind"))
        if label is None:
            raise LoadError(f"relation `{n}` has unknown kind {r.get('kind')!r}")
        relation_rows.append(_node(n, ["Relation", label], _clean({
            "name": n, "kind": r["kind"], "system": r.get("system"), "defines": r.get("defines"),
            "inputs": r.get("inputs") or [], "constrains": r.get("constrains"),
            "expression": _expression_text(r), "canonical": r.get("canonical"), "latex": r.get("latex"),
            "description": r.get("description"), "variant": r.get("variant"), "leaves_out": r.get("leaves_out"),
            "validity": r.get("validity"),
            "references": r.get("references") or [], "dimension_checked": r.get("dimension_checked"),
            "file": r.get("file"), "line": r.get("line"), "record": _record(r)})))
    p.nodes.append(("Relation", relation_rows))

    # Keys sorted as in build/manifest.json: some outputs follow a table's key order (a preset's targets).
    p.nodes.append(("Table", [_node(k, ["Table"], {"name": k, "json": _record(v)})
                              for k, v in sorted(manifest.items()) if k not in GRAPH_PARTS]))

    def label_of(name: str, where: str) -> str:
        if name in variables:
            return "Variable"
        if name in constants:
            return "Constant"
        raise LoadError(f"{where} names `{name}`, which is neither a variable nor a constant")

    edges: dict[str, list[dict]] = {}

    def add(kind: str, src_label: str, src: str, dst_label: str, dst: str, props: dict | None = None) -> None:
        edges.setdefault(kind, []).append(((src_label, src), (dst_label, dst),
                                           {**props, MARKER: _digest(props)} if props else NO_PROPS))

    for e in manifest.get("edges", []):
        kind, src, dst = e["type"], e["source"], e["target"]
        if kind == "FEEDS":
            if dst not in relations:
                raise LoadError(f"edge FEEDS {src} -> {dst}: no relation `{dst}`")
            add(kind, label_of(src, f"relation `{dst}`"), src, "Relation", dst)
        elif kind == "DEFINES":
            if src not in relations or dst not in variables:
                raise LoadError(f"edge DEFINES {src} -> {dst}: no relation `{src}` or variable `{dst}`")
            add(kind, "Relation", src, "Variable", dst)
        elif kind == "CONSTRAINS":
            if src not in relations:
                raise LoadError(f"edge CONSTRAINS {src} -> {dst}: no relation `{src}`")
            add(kind, "Relation", src, label_of(dst, f"constraint `{src}`"), dst)
        else:
            raise LoadError(f"edge of unknown type {kind!r} ({src} -> {dst})")
    for label, entries in (("Variable", variables), ("Relation", relations)):
        for n, x in sorted(entries.items()):
            if x.get("system") in systems:
                add("IN_SYSTEM", label, n, "System", x["system"])
    for label, entries in (("Variable", variables), ("Relation", relations), ("Constant", constants)):
        for n, x in sorted(entries.items()):
            for key in dict.fromkeys(x.get("references") or []):
                if key in references:
                    add("CITES", label, n, "Reference", key)
    for n, x in sorted(presets.items()):
        for var, value in sorted(x.get("assignments", {}).items()):
            if var not in variables:
                raise LoadError(f"preset `{n}` assigns `{var}`, which is not a variable")
            # '500 W' or a number as written; a sourced value's fields (value, units, sd, reference) as they are
            add("ASSIGNS", "Preset", n, "Variable", var, _clean(value if isinstance(value, dict) else {"value": value}))
    p.edges = sorted(edges.items())

    # A node's marker covers its labels, its properties and its outgoing relationships, so a node whose
    # marker (and degree) is unchanged keeps its relationships as they are: the load reads and writes
    # relationships only around the nodes that changed.
    out: dict[tuple[str, str], list] = {}
    for rel_type, rows in p.edges:
        for a, b, props in rows:
            out.setdefault(a, []).append((rel_type, b, props.get(MARKER)))
    for label, rows in p.nodes:
        for row in rows:
            edges_out = sorted(out.get((label, row["name"]), []))
            row["props"][MARKER] = _digest(row["props"], row["labels"], edges_out)
            row["degree"] = len(edges_out)

    build = dict(build or {})
    p.build = _clean({
        "name": "build", "schema_version": manifest.get("schema_version"), "catalog_hash": manifest.get("catalog_hash"),
        "headline_targets": list(manifest.get("headline_targets", [])),
        "variables": len(variables), "constants": len(constants), "relations": len(relations),
        "references": len(references), "systems": len(systems), "presets": len(manifest.get("presets", {})),
        **build, MARKER: load})
    return p


def catalog_commit(catalog: Path | None) -> str | None:
    """HEAD of the git checkout holding the catalog, `+dirty` when the catalog has local changes.

    Read-only git (`--no-optional-locks`: not even the index is refreshed); None outside git (the
    Build node then says `unknown`).
    """
    if catalog is None:
        return None
    base = ["git", "--no-optional-locks", "-C", str(catalog)]
    try:
        head = subprocess.run([*base, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        if head.returncode != 0:
            return None
        dirty = subprocess.run([*base, "status", "--porcelain", "--", "."], capture_output=True, text=True,
                               timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return head.stdout.strip() + ("+dirty" if dirty.returncode == 0 and dirty.stdout.strip() else "")


def _batches(rows: list, size: int) -> Iterable[list]:
    for i in range(0, len(rows), size):
        yield rows[i:i + size]


def _written(result) -> int:
    record = result.single()
    return int(record[0]) if record is not None else 0


@contextlib.contextmanager
def _collector_paused():
    """Python's cyclic garbage collector off for the duration. A load allocates hundreds of thousands of
    rows that live until it ends, and the collector's passes (about 800 in a load of the 10,000-variable
    catalog) walk them again and again: 1.2-2.9 s of that load (measured with gc.callbacks). The cyclic
    garbage a load makes (about 100,000 objects for that catalog) is collected after it instead."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


@_collector_paused()
def load(manifest: dict, settings: Neo4jSettings | None = None, *, force: bool = False,
         manifest_hash: str | None = None, catalog: Path | None = None, loaded_by: str = "gpustack compile",
         batch_size: int = BATCH_SIZE, progress: Progress | None = None) -> dict:
    """Replace the graph in Neo4j with `manifest`, atomically. Returns what was loaded.

    Refuses (InputError, exit 2) when the database holds nodes gpustack did not write, unless
    `force` (then they are deleted with the old graph, in the same transaction, and every node and
    relationship is rewritten, not only those that changed).
    """
    settings = settings or Neo4jSettings.resolve()
    t0 = time.monotonic()
    if manifest_hash is None:
        manifest_hash = mf.manifest_hash(mf.dumps(manifest))
    build = {"manifest_hash": manifest_hash, "loaded_by": loaded_by,
             "compiled_at": datetime.now(UTC).replace(microsecond=0).isoformat(),
             "catalog_commit": catalog_commit(catalog) or "unknown"}
    try:
        p = plan(manifest, build)
    except LoadError as exc:
        raise InputError(f"cannot load the manifest into Neo4j: {exc}") from None
    drv = driver(settings)
    in_tx = False
    try:
        with translate(settings, "loading the graph into"):
            with drv.session(database=settings.database) as session:
                state = session.run(query("load_state")).single()
                if state["foreign"] and not force:
                    labels = ", ".join(":".join(x) or "(no label)" for x in state["sample_labels"])
                    raise InputError(
                        f"Neo4j at {settings.where} holds {state['foreign']} node(s) gpustack did not create "
                        f"(labels such as {labels}); refusing to touch them",
                        "point NEO4J_URI/--database at a database for gpustack, or pass --force to delete them")
                schema = statements("schema")
                present = set(session.run(query("schema_present")).single()["names"])
                if not all(re.search(r"\b(gpustack_\w+)", stmt).group(1) in present for stmt in schema):
                    for stmt in schema:
                        session.run(stmt).consume()
                in_tx = True
                result = _load_tx(session, p, force, batch_size, progress)
    except LoadError as exc:
        raise InfrastructureError(f"loading into Neo4j at {settings.where} failed and was rolled back; "
                                  f"the previous graph is unchanged: {exc}") from None
    except InfrastructureError as exc:
        if in_tx:
            raise InfrastructureError(f"{exc.message}; the load was rolled back and the previous graph is "
                                      "unchanged", exc.hint) from None
        raise
    finally:
        drv.close()
    return {"uri": settings.uri, "database": settings.database, "manifest_hash": manifest_hash,
            "previous_manifest_hash": state["manifest_hash"],
            "compiled_at": build["compiled_at"], "catalog_commit": build["catalog_commit"],
            "seconds": round(time.monotonic() - t0, 3), **result}


def _load_tx(session, p: Plan, force: bool, batch_size: int, progress: Progress | None) -> dict:
    """Everything in one transaction: write what is new or changed, delete what this compile does not
    write, check, commit. Stale nodes go last: deleted nodes left in the transaction's state slow down
    every write after them."""
    tx = session.begin_transaction()
    try:
        removed_foreign = 0
        if force:
            removed_foreign = _written(tx.run(query("load_sweep_foreign")))

        def run(step: str, name: str, rows: list, key: str = "rows") -> list:
            """Rows in batches; every row must be written (a missing node shows as a short count)."""
            records, done = [], 0
            for batch in _batches(rows, batch_size):
                record = tx.run(query(name), {key: batch}).single()
                n = int(record["written"]) if record is not None else 0
                if n != len(batch):
                    raise LoadError(f"{step}: wrote {n} of {len(batch)} rows (a node it needs is missing)")
                records.append(record)
                done += len(batch)
                if progress:
                    progress(step, done, len(rows))
            return records

        edges_before = _written(tx.run(query("load_edge_count")))
        kinds = {label for label, _ in p.nodes}
        wanted = {(label, row["name"]) for label, rows in p.nodes for row in rows}
        # A node is rewritten unless its digest, labels, number of properties and of outgoing relationships
        # are the ones this compile would write (--force rewrites all: values edited by hand then go too).
        held: dict[tuple[str, str], tuple[str, object]] = {}  # (label, name) -> (element id, what it holds)
        stale = []
        for rec in tx.run(query("load_graph_nodes")):
            labels = [label for label in rec["labels"] if label in kinds]
            node = (labels[0], rec["name"]) if len(labels) == 1 else None
            if node in wanted and node not in held:
                holds = None if force else (rec["digest"], sorted(rec["labels"]), rec["keys"], rec["degree"])
                held[node] = (rec["id"], holds)
            else:
                stale.append(rec["id"])  # the previous Build among them

        ids = {node: eid for node, (eid, _) in held.items()}  # (label, name) -> element id of the node
        dirty: set[tuple[str, str]] = set()  # nodes written: only their outgoing relationships can differ
        for label, rows in p.nodes:
            new, changed = [], []
            for row in rows:
                eid, holds = held.get((label, row["name"]), (None, None))
                if eid is None:
                    new.append(row)
                elif holds != (row["props"][MARKER], sorted(row["labels"]), len(row["props"]), row["degree"]):
                    changed.append({"id": eid, "labels": row["labels"], "props": row["props"]})
                else:
                    continue
                dirty.add((label, row["name"]))
            for record in run(label, "load_create_nodes", new):
                ids.update(((kind, name), eid) for kind, name, eid in record["ids"])
            run(label, "load_update_nodes", changed)
        unchanged_nodes = p.node_count - 1 - len(dirty)

        have: dict[tuple[str, str, str], tuple[str, object]] = {}  # (type, a, b) -> (element id, what it holds)
        stale_edges = []
        rewritten = [held[node][0] for node in dirty if node in held]
        for batch in _batches(rewritten, batch_size):
            for rec in tx.run(query("load_graph_edges"), ids=batch):
                edge = (rec["type"], rec["a"], rec["b"])
                if edge in have:
                    stale_edges.append(rec["id"])
                else:
                    have[edge] = (rec["id"], None if force else (rec["digest"], rec["keys"]))
        unchanged_edges, created_edges = p.edge_count, 0
        for rel_type, rows in p.edges:
            new, changed = [], []
            for a, b, props in rows:
                if a not in dirty:
                    continue
                try:
                    edge = (rel_type, ids[a], ids[b])
                except KeyError as exc:
                    raise LoadError(f"{rel_type}: no node {exc.args[0]} was written") from None
                eid, holds = have.pop(edge, (None, None))
                if eid is None:
                    new.append({"type": rel_type, "a": edge[1], "b": edge[2], "props": props})
                elif holds != (props.get(MARKER), len(props)):
                    changed.append({"id": eid, "props": props})
                else:
                    continue
                unchanged_edges -= 1
            run(f"[:{rel_type}]", "load_edges", new)
            run(f"[:{rel_type}]", "load_edge_props", changed)
            created_edges += len(new)
        gone = set(stale)  # their relationships go with them
        stale_edges += [eid for (_, _, b), (eid, _) in have.items() if b not in gone]
        run("stale relationships", "load_delete_edges", stale_edges, key="ids")
        run("stale nodes", "load_delete_nodes", stale, key="ids")

        if _written(tx.run(query("load_build"), props=p.build)) != 1:
            raise LoadError("the Build node was not written")
        counts = tx.run(query("load_counts")).single()
        if counts["foreign"] or counts["nodes"] != p.node_count:
            raise LoadError(f"expected {p.node_count} nodes after the load, found {counts['nodes']} "
                            f"({counts['foreign']} not from gpustack)")
        if counts["relationships"] != p.edge_count:
            raise LoadError(f"expected {p.edge_count} relationships after the load, found {counts['relationships']}")
        tx.commit()
    except BaseException:
        if not tx.closed():
            try:
                tx.rollback()
            except Exception:  # noqa: BLE001 - the server rolls back on its own when the connection goes
                pass
        raise
    return {"nodes": counts["nodes"], "relationships": counts["relationships"], "load": p.load,
            "removed_nodes": len(stale), "removed_relationships": edges_before + created_edges - counts["relationships"],
            "removed_foreign": removed_foreign, "unchanged_nodes": unchanged_nodes,
            "unchanged_relationships": unchanged_edges}
