"""The compiled manifest: the versioned contract that every other tool reads.

Deterministic: keys sorted, no timestamps, so the same catalog gives byte-identical output. This
module serialises it (records.py reads it back, version-checked); `manifest_build.py` makes it.
"""

from __future__ import annotations

import hashlib
import json

SCHEMA_VERSION = "1.2"


def dumps(manifest: dict) -> str:
    return json.dumps(manifest, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def manifest_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def graph_of(manifest: dict):
    from .graph import CatalogGraph, RelationEdges

    rels = [RelationEdges(n, r["kind"], tuple(r["inputs"]), r["defines"]) for n, r in manifest["relations"].items()]
    return CatalogGraph(manifest["variables"], manifest["constants"], rels)
