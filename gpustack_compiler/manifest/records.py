"""The typed reader of the compiled manifest's tables (the contract every other tool reads): its schema
version is checked, and the engine reads `tables.presets`, `tables.units`, ... instead of raw JSON keys,
whichever graph source (the manifest in memory or Neo4j) handed the tables over."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gpustack_compiler.base.errors import CatalogError

from .serialise import SCHEMA_VERSION


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


@dataclass(frozen=True, slots=True)
class Bounds:
    """Inclusive bounds in the variable's declared units."""

    min: float | None
    max: float | None


@dataclass(frozen=True, slots=True)
class Root:
    category: str
    family: str
    note: str | None = None


@dataclass(frozen=True, slots=True)
class VariableRecord:
    name: str
    system: str
    units: str
    scale: float  # of the declared unit, in coherent base units
    dimension: dict
    description: str
    symbol: str | None
    quantity: str | None
    assumptions: tuple[str, ...]
    bounds: Bounds | None
    references: tuple[str, ...]
    root: Root | None
    is_root: bool
    is_leaf: bool
    file: str
    line: int

    @classmethod
    def parse(cls, d: dict) -> VariableRecord:
        bounds, root = d.get("bounds"), d.get("root")
        return cls(d["name"], d["system"], d["units"], float(d["scale"]), d["dimension"], d["description"],
                   d.get("symbol"), d.get("quantity"), tuple(d.get("assumptions") or ()),
                   Bounds(bounds.get("min"), bounds.get("max")) if bounds else None, tuple(d.get("references") or ()),
                   Root(root["category"], root["family"], root.get("note")) if root else None,
                   bool(d["is_root"]), bool(d["is_leaf"]), d["file"], int(d["line"]))

    def to_dict(self) -> dict:
        """The manifest's JSON form of the record."""
        out = {f: getattr(self, f) for f in self.__slots__}
        out["assumptions"], out["references"] = list(self.assumptions), list(self.references)
        out["bounds"] = None if self.bounds is None else {"min": self.bounds.min, "max": self.bounds.max}
        out["root"] = None if self.root is None else {"category": self.root.category, "family": self.root.family,
                                                      "note": self.root.note}
        return out


@dataclass(frozen=True, slots=True)
class ConstantRecord:
    name: str
    value: float
    units: str
    scale: float
    si_value: float  # the value in coherent base units
    dimension: dict
    description: str
    symbol: str | None
    exact: bool
    references: tuple[str, ...]
    file: str
    line: int

    @classmethod
    def parse(cls, d: dict) -> ConstantRecord:
        return cls(d["name"], float(d["value"]), d["units"], float(d["scale"]), float(d["si_value"]), d["dimension"],
                   d["description"], d.get("symbol"), bool(d["exact"]), tuple(d.get("references") or ()), d["file"],
                   int(d["line"]))

    def to_dict(self) -> dict:
        out = {f: getattr(self, f) for f in self.__slots__}
        out["references"] = list(self.references)
        return out
