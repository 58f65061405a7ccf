"""The typed reader of the compiled manifest's tables (the contract every other tool reads): its schema
version is checked, and the engine reads `tables.presets`, `tables.units`, ... instead of raw JSON keys,
whichever graph source (the manifest in memory or Neo4j) handed the tables over."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .errors import CatalogError
from .manifest import SCHEMA_VERSION


@dataclass(frozen=True)
class Tables:
    """Everything in the manifest besides the graph: units, presets, variant keys, bindings, systems,
    references and statistics, version-checked."""

    schema_version: str
    catalog_hash: str
    units: dict
    presets: dict[str, dict]
    variant_keys: frozenset[str]
    bindings: dict
    systems: dict
    headline_targets: tuple[str, ...]
    references: dict
    stats: dict

    @classmethod
    def parse(cls, data: dict, where: str = "the manifest") -> Tables:
        check_version(data, where)
        try:
            return cls(data["schema_version"], data["catalog_hash"], data["units"], data["presets"],
                       frozenset(data["variant_keys"]), data["bindings"], data["systems"],
                       tuple(data["headline_targets"]), data["references"], data["stats"])
        except KeyError as exc:
            raise CatalogError(f"{where}: manifest without its `{exc.args[0]}` table",
                               "recompile with `gpustack compile`") from None


def check_version(data: dict, where: str) -> None:
    version = str(data.get("schema_version", ""))
    if version.split(".")[0] != SCHEMA_VERSION.split(".")[0]:
        raise CatalogError(f"{where}: manifest schema {version or '(none)'} is not {SCHEMA_VERSION}",
                           "recompile with `gpustack compile` (and reload Neo4j with `gpustack compile --neo4j`)")


def read_manifest(path: Path) -> dict:
    """A manifest file, version-checked (a missing or unreadable one is a CatalogError naming it)."""
    import json

    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CatalogError(f"{path}: no manifest", "run `gpustack compile` first") from None
    except (OSError, ValueError) as exc:
        raise CatalogError(f"{path}: unreadable manifest ({exc})") from None
    check_version(data, str(path))
    return data
