"""Load a catalog directory into resolved entries, reporting every problem as a finding.

One entry that fails validation does not take its file down with it: entries are validated one by
one, so a single typo yields one finding instead of a cascade of unknown names.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import TypeAdapter, ValidationError

from gpustack_compiler.base.fileset import catalog_files, content_hash
from gpustack_compiler.base.findings import Findings
from gpustack_compiler.base.forked import can_fork, fork_map
from gpustack_compiler.base.limits import MAX_CATALOG_FILE_BYTES, FileProblem, load_text
from gpustack_compiler.base.suggest import with_suggestion
from gpustack_compiler.base.yaml_lines import LinedDict, YamlError, line_at, load_or_error
from gpustack_compiler.language import models as m
from gpustack_compiler.language.expressions import ANY, DimensionInference, ExprError, Parsed, is_keyword_free, parse
from gpustack_compiler.language.kinds import KEYED, RelationKind, kind_of
from gpustack_compiler.language.units import Unit, UnitError, UnitSystem

MODELINE = re.compile(r"^#\s*yaml-language-server:\s*\$schema=\S+")
NAME_RE = re.compile(m.NAME_PATTERN)
CONST_PREFIX = "const"
BINDINGS_FOLDER = "bindings"
ROOT_FILES = {"units.yaml": "units", "constants.yaml": "constants", "references.yaml": "references",
              "systems.yaml": "systems"}
_RELATION = TypeAdapter(m.Relation)
# Catalogs at least this large (bytes of YAML) are parsed on every core first (a fork costs some tens of ms).
PARALLEL_YAML_BYTES = 2_000_000


@dataclass
class Loc:
    file: str
    line: int


@dataclass
class VarEntry:
    spec: m.Variable
    system: str
    loc: Loc
    unit: Unit | None = None


@dataclass
class ConstEntry:
    spec: m.Constant
    loc: Loc
    unit: Unit | None = None


@dataclass
class RelEntry:
    spec: object  # one of the relation models
    system: str
    loc: Loc
    parts: dict[str, Parsed] = field(default_factory=dict)  # field label -> parsed expression
    dim_checked: bool = False

    @property
    def kind(self) -> str:
        return self.spec.kind

    @property
    def rules(self) -> RelationKind:
        return kind_of(self)

    @property
    def output(self) -> str | None:
        return getattr(self.spec, "defines", None)

    @property
    def names(self) -> set[str]:
        out: set[str] = set()
        for p in self.parts.values():
            out.update(p.names)
        return out | self.rules.extra_names(self.spec)

    @property
    def inputs(self) -> tuple[str, ...]:
        """Names that feed the relation, less an unknown that appears in its own definition."""
        names = self.names
        if self.rules.defines_itself:
            names.discard(self.output)
        return tuple(sorted(names))


@dataclass
class PresetEntry:
    spec: m.Preset
    loc: Loc
    data: LinedDict


@dataclass
class BindingEntry:
    """A file of catalog/bindings/: what the engine's analyses mean by catalog names."""

    spec: m.Strict
    loc: Loc
    data: LinedDict


@dataclass
class Catalog:
    root: Path
    units: UnitSystem | None = None
    systems: dict[str, m.SystemSpec] = field(default_factory=dict)
    headline_targets: list[str] = field(default_factory=list)
    variables: dict[str, VarEntry] = field(default_factory=dict)
    constants: dict[str, ConstEntry] = field(default_factory=dict)
    relations: dict[str, RelEntry] = field(default_factory=dict)
    references: dict[str, tuple[m.Reference, Loc]] = field(default_factory=dict)
    presets: dict[str, PresetEntry] = field(default_factory=dict)
    bindings: dict[str, BindingEntry] = field(default_factory=dict)  # kind -> file
    file_hashes: dict[str, str] = field(default_factory=dict)
    findings: Findings = field(default_factory=Findings)

    def known_names(self) -> set[str]:
        return set(self.variables) | set(self.constants)


class _Loader:
    def __init__(self, root: Path):
        self.cat = Catalog(root=root)
        self.f = self.cat.findings
        self.seen_names: dict[str, Loc] = {}
        self.headline_lines: dict[str, int] = {}
        self.parsed: dict[Path, object] = {}  # path -> load_or_error(its text), parsed ahead on every core

    # ---- files -----------------------------------------------------------------------------
    def read(self, path: Path):
        rel = self.rel(path)
        try:
            text = load_text(path, MAX_CATALOG_FILE_BYTES)
        except FileProblem as exc:
            self.f.add(rel, exc.line, "file.unreadable", f"cannot read catalog file: {exc.reason}")
            return None
        if not MODELINE.match(text.lstrip("\ufeff").split("\n", 1)[0]):
            self.f.add(rel, 1, "yaml.modeline",
                       "first line must be a `# yaml-language-server: $schema=...` modeline pointing into schemas/")
        parsed = self.parsed.pop(path, None) or load_or_error(text)
        if isinstance(parsed, YamlError):
            self.f.add(rel, parsed.line, "yaml.syntax", parsed.message, column=parsed.column)
            return None
        data, dups = parsed
        for key, line in dups:
            self.f.add(rel, line, "yaml.duplicate-key", f"key {key!r} appears twice in one mapping")
        if not isinstance(data, LinedDict):
            self.f.add(rel, 1, "schema.invalid", "file must be a YAML mapping at the top level")
            return None
        return data

    def parse_ahead(self, paths: list[Path]) -> None:
        """Parse a large catalog's YAML on every core before it is checked in order: the Python half of the
        YAML loader is a third of a cold check. Files that cannot be read are left to `read`."""
        try:
            size = sum(p.stat().st_size for p in paths)
        except OSError:
            return
        if size < PARALLEL_YAML_BYTES or not can_fork():
            return
        texts = {}
        for path in paths:
            try:
                texts[path] = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                continue
        self.parsed = dict(zip(texts, fork_map(load_or_error, list(texts.values()))))

    def rel(self, path: Path) -> str:
        return f"{self.cat.root.resolve().name}/{path.relative_to(self.cat.root).as_posix()}"

    def validate(self, model, data, rel: str, prefix: tuple = ()):
        """Validate with pydantic; every error becomes a finding with the line it points at."""
        try:
            if isinstance(model, TypeAdapter):
                return model.validate_python(data)
            return model.model_validate(data)
        except ValidationError as exc:
            for err in _one_branch(exc.errors(include_url=False), data):
                loc = tuple(err["loc"])
                line = line_at(data, loc)
                path = ".".join(str(p) for p in prefix + loc if not _is_branch(p))
                if err["type"] == "extra_forbidden":
                    fid, msg = "schema.unknown-key", f"unknown key `{loc[-1]}`"
                elif err["type"] == "missing":
                    fid, msg = "schema.missing-field", f"missing field `{loc[-1]}`"
                elif err["type"] == "union_tag_invalid":
                    fid, msg = "schema.invalid", (f"unknown relation kind; expected one of "
                                                  f"{', '.join(m.RELATION_KINDS)}")
                else:
                    fid, msg = "schema.invalid", err["msg"]
                self.f.add(rel, line, fid, f"{msg} (at {path})" if path else msg)
            return None

    def entries(self, data: LinedDict, key: str, model, rel: str, required: bool = False):
        """Validate a list of entries one at a time; yields (spec, line, raw)."""
        items = data.get(key)
        if items is None:
            if required:
                self.f.add(rel, data.line, "schema.missing-field", f"missing field `{key}`")
            return
        if not isinstance(items, list):
            self.f.add(rel, data.line_of(key), "schema.invalid", f"`{key}` must be a list")
            return
        for i, item in enumerate(items):
            line = items.line_of(i)
            spec = self.validate(model, item, rel, (key, i))
            if spec is not None:
                yield spec, line, item

    def top_keys(self, data: LinedDict, allowed: set[str], rel: str) -> None:
        for key in data:
            if key not in allowed:
                self.f.add(rel, data.line_of(key), "schema.unknown-key",
                           with_suggestion(f"unknown key `{key}`", str(key), allowed))

    # ---- the catalog -----------------------------------------------------------------------
    def run(self) -> Catalog:
        root = self.cat.root
        if not root.is_dir():
            self.f.add(str(root), 1, "catalog.missing", "catalog directory not found")
            return self.cat
        _, self.cat.file_hashes = content_hash(root)
        self.load_references(root / "references.yaml")
        self.load_units(root / "units.yaml")
        self.load_systems(root / "systems.yaml")
        self.load_constants(root / "constants.yaml")
        files = catalog_files(root)
        self.parse_ahead([p for p in files if len(p.relative_to(root).parts) > 1])
        for path in files:
            relpath = path.relative_to(root)
            top = relpath.parts[0]
            if len(relpath.parts) == 1:
                if relpath.name not in ROOT_FILES:
                    self.f.add(self.rel(path), 1, "catalog.unknown-file",
                               f"unexpected file; top-level files are {', '.join(sorted(ROOT_FILES))}")
            elif top == "presets":
                self.load_presets(path)
            elif top == BINDINGS_FOLDER:
                self.load_bindings(path)
            elif top in self.cat.systems:
                self.load_system_file(path, top)
            else:
                self.f.add(self.rel(path), 1, "catalog.unknown-file",
                           with_suggestion(f"folder `{top}` is not a system declared in catalog/systems.yaml",
                                           top, self.cat.systems))
        for name in self.cat.headline_targets:
            if name not in self.cat.variables:
                self.f.add("catalog/systems.yaml", self.headline_lines.get(name, 1), "catalog.unknown-headline",
                           f"headline target `{name}` is not a declared variable")
        return self.cat

    def missing_root_file(self, path: Path) -> None:
        self.f.add(self.rel(path), 1, "catalog.missing", f"required file {path.name} is missing")

    def load_references(self, path: Path) -> None:
        if not os.path.lexists(path):  # a symbolic link loop is there, and reported when read
            return self.missing_root_file(path)
        data = self.read(path)
        if data is None:
            return
        rel = self.rel(path)
        self.top_keys(data, {"references"}, rel)
        for ref, line, _ in self.entries(data, "references", m.Reference, rel, required=True):
            if ref.key in self.cat.references:
                other = self.cat.references[ref.key][1]
                self.f.add(rel, line, "name.duplicate", f"reference key `{ref.key}` already defined at "
                           f"{other.file}:{other.line}")
                continue
            self.cat.references[ref.key] = (ref, Loc(rel, line))

    def load_units(self, path: Path) -> None:
        if not os.path.lexists(path):  # a symbolic link loop is there, and reported when read
            return self.missing_root_file(path)
        data = self.read(path)
        if data is None:
            return
        rel = self.rel(path)
        spec = self.validate(m.UnitsFile, data, rel)
        if spec is None:
            return
        self.check_refs(spec.references, rel, data.line_of("references"), "units.yaml", require=True)
        units = UnitSystem([(d.name, d.unit) for d in spec.base_dimensions])
        for amb in spec.ambiguous:
            units.ambiguous[amb.symbol] = amb.hint
        for i, u in enumerate(spec.units):
            line = data["units"].line_of(i)
            if u.symbol in units.ambiguous:
                self.f.add(rel, line, "unit.ambiguous", f"unit `{u.symbol}` is declared ambiguous")
                continue
            try:
                units.define(u.symbol, u.definition)
            except UnitError as exc:
                self.f.add(rel, line, "unit.invalid", f"unit `{u.symbol}`: {exc}")
        self.cat.units = units

    def load_systems(self, path: Path) -> None:
        if not os.path.lexists(path):  # a symbolic link loop is there, and reported when read
            return self.missing_root_file(path)
        data = self.read(path)
        if data is None:
            return
        rel = self.rel(path)
        self.top_keys(data, {"systems", "headline_targets"}, rel)
        headlines = data.get("headline_targets")
        if isinstance(headlines, list):
            self.cat.headline_targets = [h for h in headlines if isinstance(h, str)]
            self.headline_lines = {h: headlines.line_of(i) for i, h in enumerate(headlines)}
        prefixes: dict[str, str] = {}
        for spec, line, _ in self.entries(data, "systems", m.SystemSpec, rel, required=True):
            if spec.name in self.cat.systems or spec.prefix in prefixes or spec.prefix == CONST_PREFIX:
                self.f.add(rel, line, "name.duplicate", f"system `{spec.name}` or prefix `{spec.prefix}` "
                           "is declared twice (or is the reserved prefix `const`)")
                continue
            prefixes[spec.prefix] = spec.name
            self.cat.systems[spec.name] = spec

    def load_constants(self, path: Path) -> None:
        if not os.path.lexists(path):  # a symbolic link loop is there, and reported when read
            return self.missing_root_file(path)
        data = self.read(path)
        if data is None:
            return
        rel = self.rel(path)
        self.top_keys(data, {"constants"}, rel)
        for spec, line, raw in self.entries(data, "constants", m.Constant, rel, required=True):
            if not self.check_name(spec.name, rel, line, CONST_PREFIX):
                continue
            entry = ConstEntry(spec, Loc(rel, line))
            entry.unit = self.parse_unit(spec.units, rel, raw.line_of("units"), spec.name)
            self.check_refs(spec.references, rel, raw.line_of("references"), spec.name, require=True)
            self.cat.constants[spec.name] = entry

    def load_system_file(self, path: Path, system: str) -> None:
        data = self.read(path)
        if data is None:
            return
        rel = self.rel(path)
        self.top_keys(data, {"variables", "relations"}, rel)
        prefix = self.cat.systems[system].prefix
        for spec, line, raw in self.entries(data, "variables", m.Variable, rel):
            if not self.check_name(spec.name, rel, line, prefix):
                continue
            entry = VarEntry(spec, system, Loc(rel, line))
            entry.unit = self.parse_unit(spec.units, rel, raw.line_of("units"), spec.name)
            self.check_refs(spec.references, rel, raw.line_of("references"), spec.name, require=True)
            self.check_variable(spec, rel, raw)
            self.cat.variables[spec.name] = entry
        for spec, line, raw in self.entries(data, "relations", _RELATION, rel):
            if not self.check_name(spec.name, rel, line, prefix):
                continue
            self.check_refs(spec.references, rel, raw.line_of("references"), spec.name, require=True)
            self.cat.relations[spec.name] = RelEntry(spec, system, Loc(rel, line))

    def load_presets(self, path: Path) -> None:
        data = self.read(path)
        if data is None:
            return
        rel = self.rel(path)
        self.top_keys(data, {"presets"}, rel)
        for spec, line, raw in self.entries(data, "presets", m.Preset, rel, required=True):
            if spec.name in self.cat.presets:
                other = self.cat.presets[spec.name].loc
                self.f.add(rel, line, "name.duplicate", f"preset `{spec.name}` already defined at "
                           f"{other.file}:{other.line}")
                continue
            self.check_refs(spec.references, rel, raw.line_of("references"), spec.name,
                            require=spec.provenance != "synthetic_fixture")
            self.cat.presets[spec.name] = PresetEntry(spec, Loc(rel, line), raw)

    def load_bindings(self, path: Path) -> None:
        relpath = path.relative_to(self.cat.root)
        kind, model = m.BINDING_FILES.get(relpath.name, (None, None)) if len(relpath.parts) == 2 else (None, None)
        if kind is None:
            self.f.add(self.rel(path), 1, "catalog.unknown-file", f"unexpected file; the files of {BINDINGS_FOLDER}/ "
                       f"are {', '.join(m.BINDING_FILES)}")
            return
        data = self.read(path)
        if data is None:
            return
        spec = self.validate(model, data, self.rel(path))
        if spec is not None:
            self.cat.bindings[kind] = BindingEntry(spec, Loc(self.rel(path), 1), data)

    # ---- entry checks ----------------------------------------------------------------------
    def check_name(self, name: str, rel: str, line: int, prefix: str) -> bool:
        if not NAME_RE.match(name) or not is_keyword_free(name):
            self.f.add(rel, line, "name.format", f"`{name}` is not a dotted lower-case name "
                       "(`system.part.part`, no Python keywords as parts)")
            return False
        if name.split(".", 1)[0] != prefix:
            self.f.add(rel, line, "name.prefix", f"`{name}` must start with `{prefix}.` in this folder")
            return False
        if name in self.seen_names:
            other = self.seen_names[name]
            self.f.add(rel, line, "name.duplicate", f"`{name}` is already defined at {other.file}:{other.line}")
            return False
        self.seen_names[name] = Loc(rel, line)
        return True

    def parse_unit(self, text: str, rel: str, line: int, owner: str) -> Unit | None:
        if self.cat.units is None:
            return None
        try:
            return self.cat.units.parse(text)
        except UnitError as exc:
            fid = "unit.ambiguous" if "ambiguous" in str(exc) else "unit.invalid"
            self.f.add(rel, line, fid, f"{owner}: {exc}")
            return None

    def check_refs(self, keys: list[str], rel: str, line: int, owner: str, require: bool) -> None:
        check_refs(self.cat, keys, rel, line, owner, require)

    def check_variable(self, spec: m.Variable, rel: str, raw: LinedDict) -> None:
        a = set(spec.assumptions)
        clashes = [("positive", "negative"), ("positive", "nonpositive"), ("negative", "nonnegative")]
        for x, y in clashes:
            if x in a and y in a:
                self.f.add(rel, raw.line_of("assumptions"), "variable.assumptions",
                           f"`{spec.name}` cannot be both {x} and {y}")
        b = spec.bounds
        if b and b.min is not None and b.max is not None and b.min > b.max:
            self.f.add(rel, raw.line_of("bounds"), "variable.bounds", f"`{spec.name}` has min > max")


def check_refs(cat: Catalog, keys: list[str], rel: str, line: int, owner: str, require: bool) -> None:
    if not keys and require:
        cat.findings.add(rel, line, "ref.missing", f"`{owner}` cites no reference")
    for key in keys:
        if key not in cat.references:
            cat.findings.add(rel, line, "ref.unknown",
                             with_suggestion(f"`{owner}` cites unknown reference `{key}`", key, cat.references))


def _is_branch(part) -> bool:
    """A location segment naming a union member (`Quantity`, `float`, a relation kind), not data."""
    return isinstance(part, str) and (part in m.RELATION_KINDS or part in ("float", "str", "int")
                                      or part[:1].isupper())


def _one_branch(errors: list[dict], data) -> list[dict]:
    """pydantic reports a failed union once per member; keep the member that fits the input's shape
    (a mapping for a model member, a scalar otherwise), so one mistake is one finding."""
    groups: dict[tuple, list[dict]] = {}
    for err in errors:
        base = tuple(p for p in err["loc"] if not _is_branch(p))
        groups.setdefault(base, []).append(err)
    out = []
    for base, errs in groups.items():
        branches = {next((p for p in e["loc"] if _is_branch(p)), None) for e in errs}
        if len(branches) <= 1:
            out.extend(errs)
            continue
        node = data
        for p in base:
            node = node.get(p) if isinstance(node, dict) else (node[p] if isinstance(node, list) and
                                                                isinstance(p, int) and p < len(node) else None)
        model_branch = isinstance(node, dict)
        keep = [e for e in errs if any(_is_branch(p) and (p[:1].isupper() or p in m.RELATION_KINDS) == model_branch
                                       for p in e["loc"])]
        out.extend(keep or errs[:1])
    return out


def load_catalog(root: Path) -> Catalog:
    cat = _Loader(Path(root)).run()
    if cat.units is not None:
        _check_relations(cat)
        _check_presets(cat)
    return cat


def _check_relations(cat: Catalog) -> None:
    f, units = cat.findings, cat.units
    known = cat.known_names()
    dim_of = {n: e.unit.dim for n, e in {**cat.variables, **cat.constants}.items() if e.unit is not None}
    inference = DimensionInference(units, dim_of.get)
    for name, rel in cat.relations.items():
        spec, loc = rel.spec, rel.loc
        ok = True
        for label, (text, is_condition) in rel.rules.parts(spec).items():
            try:
                parsed = parse(text)
            except ExprError as exc:
                f.add(loc.file, loc.line, exc.id, f"{name}.{label}: {exc.message}", column=exc.column)
                ok = False
                continue
            rel.parts[label] = parsed
            if parsed.is_condition != is_condition:
                what = "a condition (an inequality)" if is_condition else "a value, not a condition"
                f.add(loc.file, loc.line, "expr.kind", f"{name}.{label} must be {what}")
                ok = False
            for n in parsed.names:
                if n not in known:
                    f.add(loc.file, loc.line, "expr.unknown-name", with_suggestion(
                        f"{name}.{label}: `{n}` is not a declared variable or constant", n, known))
                    ok = False
            for u in parsed.unit_literals:
                try:
                    units.parse(u)
                except UnitError as exc:
                    f.add(loc.file, loc.line, "unit.invalid", f"{name}.{label}: unit('{u}'): {exc}")
                    ok = False
        out = rel.output
        if out is not None:
            if out in cat.constants:
                f.add(loc.file, loc.line, "relation.defines-constant", f"{name} defines constant `{out}`")
                ok = False
            elif out not in cat.variables:
                f.add(loc.file, loc.line, "relation.unknown-target",
                      with_suggestion(f"{name} defines unknown variable `{out}`", out, cat.variables))
                ok = False
        for fid, message in rel.rules.problems(spec, known):
            f.add(loc.file, loc.line, fid, message)
            ok = False
        if ok:
            rel.dim_checked = _check_dimensions(cat, rel, inference, dim_of)


def _check_dimensions(cat: Catalog, rel: RelEntry, inference: DimensionInference, dim_of: dict) -> bool:
    """True when every part of the relation was decided and agrees; every other outcome is a finding."""
    f, loc = cat.findings, rel.loc
    expected: dict[str, object] = {}
    if rel.output:
        target = dim_of.get(rel.output)
        if target is None:
            return False  # the target's unit is broken, already a finding
        expected = rel.rules.dimensions(rel.spec, target, dim_of.get, cat.units.none)
        if expected is None:
            return False
    decided = True
    for label, parsed in rel.parts.items():
        got, problems = inference.infer(parsed)
        for pr in problems:
            f.add(loc.file, loc.line, pr.id, f"{rel.spec.name}.{label}: {pr.message}")
        if problems:
            decided = False
            continue
        if got is None:
            f.add(loc.file, loc.line, "dim.undecided", f"{rel.spec.name}.{label}: dimension could not be decided")
            decided = False
            continue
        want = expected.get(label)
        if want is not None and got is not ANY and got != want:
            f.add(loc.file, loc.line, "dim.mismatch",
                  f"{rel.spec.name}.{label} has dimension {inference.fmt(got)} but "
                  f"{'`' + rel.output + '`' if rel.output else 'the relation'} needs {inference.fmt(want)}")
            decided = False
    return decided


class ValueProblem(Exception):
    """Why a value cannot be given to a variable: `id` is unknown-variable, invalid-value or unit-mismatch."""

    def __init__(self, id: str, message: str, quantity: m.Quantity | None = None):
        super().__init__(message)
        self.id, self.message = id, message
        self.quantity = quantity  # the value as read, when it could be read


def unknown_variable(cat: Catalog, name: str) -> ValueProblem | None:
    if name in cat.variables:
        return None
    return ValueProblem("unknown-variable", with_suggestion(f"unknown variable `{name}`", name, cat.variables))


def checked_quantity(cat: Catalog, name: str, value) -> m.Quantity:
    """`value` ('0.5 kW', a number in the declared unit, or a Quantity) for variable `name`; ValueProblem
    when the variable is unknown, the value unreadable or its dimension not the variable's."""
    unknown = unknown_variable(cat, name)
    if unknown is not None:
        raise unknown
    var = cat.variables[name]
    try:
        quantity = m.parse_quantity(value, var.spec.units)
        unit = cat.units.parse(quantity.units)
    except (UnitError, ValueError) as exc:
        raise ValueProblem("invalid-value", f"`{name}`: {exc}") from None
    if var.unit is not None and unit.dim != var.unit.dim:
        raise ValueProblem("unit-mismatch", f"`{name}` is given in {quantity.units} "
                           f"({cat.units.format_dim(unit.dim)}) but it is declared in {var.spec.units}", quantity)
    return quantity


def _check_presets(cat: Catalog) -> None:
    f = cat.findings
    keyed = [r for r in cat.relations.values() if r.rules.role == KEYED]
    for entry in cat.presets.values():
        spec, raw, rel = entry.spec, entry.data, entry.loc.file
        assignments = raw.get("assignments") or {}
        for name, value in spec.assignments.items():
            line = assignments.line_of(name) if isinstance(assignments, LinedDict) else entry.loc.line
            try:
                quantity = checked_quantity(cat, name, value)
            except ValueProblem as problem:
                f.add(rel, line, f"preset.{problem.id}", f"preset `{spec.name}`: {problem.message}")
                quantity = problem.quantity
                if quantity is None:
                    continue
            if quantity.reference is not None and quantity.reference not in cat.references:
                f.add(rel, line, "ref.unknown", f"preset `{spec.name}`, `{name}` cites unknown reference "
                      f"`{quantity.reference}`")
            if spec.provenance != "synthetic_fixture" and quantity.reference is None and not spec.references:
                f.add(rel, line, "ref.missing", f"sourced preset `{spec.name}` gives `{name}` without a reference")
        variants = raw.get("variants") or {}
        for name, key in spec.variants.items():
            line = variants.line_of(name) if isinstance(variants, LinedDict) else entry.loc.line
            keys = {r.spec.variant for r in keyed if r.output == name}
            if name not in cat.variables:
                f.add(rel, line, "preset.unknown-variable", with_suggestion(
                    f"preset `{spec.name}` selects a variant of unknown variable `{name}`", name, cat.variables))
            elif key not in keys:
                f.add(rel, line, "preset.unknown-variant", f"preset `{spec.name}`: `{name}` has no variant "
                      f"`{key}` (variants: {', '.join(sorted(keys)) or 'none'})")
        all_keys = {r.spec.variant for r in keyed}
        modes = raw.get("modes") or []
        for i, key in enumerate(spec.modes):
            if key not in all_keys:
                line = modes.line_of(i) if hasattr(modes, "line_of") else entry.loc.line
                f.add(rel, line, "preset.unknown-variant", with_suggestion(
                    f"preset `{spec.name}`: no variable has a variant keyed `{key}`", key, all_keys))
        targets = raw.get("targets") or {}
        for label, name in spec.targets.items():
            if name not in cat.variables:
                line = targets.line_of(label) if isinstance(targets, LinedDict) else entry.loc.line
                f.add(rel, line, "preset.unknown-variable", f"preset `{spec.name}` target `{label}` names "
                      f"unknown variable `{name}`")
