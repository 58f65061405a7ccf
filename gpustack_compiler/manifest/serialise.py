"""The compiled manifest: the versioned contract that every other tool reads.

Deterministic: keys sorted, no timestamps, so the same catalog gives byte-identical output. This
module serialises it (records.py reads it back, version-checked); `manifest_build.py` makes it.
"""

from __future__ import annotations

import hashlib
import json

SCHEMA_VERSION = "1.3"


_ENCODE = json.JSONEncoder(sort_keys=True, ensure_ascii=False).encode


def dumps(manifest: dict) -> str:
    """Keys sorted, one line per entry of each top-level part (a variable, a relation, an edge), so a
    change to the catalog shows as changed lines. Built from pieces the C encoder writes: `indent=`
    makes `json` fall back to its pure-Python encoder, four times slower on a large catalog."""
    def part(key: str, value: object) -> str:
        if isinstance(value, dict) and value:
            lines = [f"  {_ENCODE(k)}: {_ENCODE(v)}" for k, v in sorted(value.items())]
        elif isinstance(value, list) and value:
            lines = [f"  {_ENCODE(v)}" for v in value]
        else:
            return f" {_ENCODE(key)}: {_ENCODE(value)}"
        brackets = "{}" if isinstance(value, dict) else "[]"
        return f" {_ENCODE(key)}: {brackets[0]}\n" + ",\n".join(lines) + f"\n {brackets[1]}"

    return "{\n" + ",\n".join(part(k, v) for k, v in sorted(manifest.items())) + "\n}\n"


def manifest_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def graph_of(manifest: dict):
    from .graph import CatalogGraph, RelationEdges

    rels = [RelationEdges(n, r["kind"], tuple(r["inputs"]), r["defines"]) for n, r in manifest["relations"].items()]
    return CatalogGraph(manifest["variables"], manifest["constants"], rels)
