"""Checks of catalog/bindings/: every variable, preset, variant key and reference a binding names must
exist, and every value it gives must fit the variable's units. Each problem is a finding at the line
of the name or value, so a renamed variable points at every binding that still uses the old name.

Run-file field paths are checked by the engine, which owns the run-file model.
"""

from __future__ import annotations

from gpustack_compiler.base.suggest import with_suggestion
from gpustack_compiler.base.yaml_lines import LinedDict, LinedList, line_at
from gpustack_compiler.language import models as m

from .catalog import Catalog, ValueProblem, check_refs, checked_quantity, unknown_variable


class _Checker:
    def __init__(self, cat: Catalog, kind: str):
        entry = cat.bindings[kind]
        self.cat, self.spec, self.data, self.file = cat, entry.spec, entry.data, entry.loc.file
        self.variant_keys = {r.spec.variant for r in cat.relations.values() if r.kind == "variant"}

    def add(self, loc: tuple, id: str, message: str) -> None:
        self.cat.findings.add(self.file, line_at(self.data, loc), id, message)

    def name(self, loc: tuple, name: str) -> None:
        problem = unknown_variable(self.cat, name)
        if problem is not None:
            self.add(loc, f"binding.{problem.id}", problem.message)

    def value(self, loc: tuple, name: str, value) -> None:
        """`value` fits the units of `name` (an unknown name is reported by `name`)."""
        if name not in self.cat.variables:
            return
        try:
            checked_quantity(self.cat, name, value)
        except ValueProblem as problem:
            self.add(loc, f"binding.{problem.id}", problem.message)

    def preset(self, loc: tuple, name: str) -> None:
        if name not in self.cat.presets:
            self.add(loc, "binding.unknown-preset", with_suggestion(f"unknown preset `{name}`", name, self.cat.presets))

    def mode(self, loc: tuple, key: str) -> None:
        if key not in self.variant_keys:
            self.add(loc, "binding.unknown-variant",
                     with_suggestion(f"no variable has a variant keyed `{key}`", key, self.variant_keys))

    def refs(self, loc: tuple, keys: list[str], owner: str) -> None:
        check_refs(self.cat, keys, self.file, line_at(self.data, loc), owner, require=False)

    def unique(self, items: list[tuple[tuple, str]], what: str) -> None:
        seen: dict[str, int] = {}
        for loc, key in items:
            if key in seen:
                self.add(loc, "binding.duplicate", f"{what} `{key}` appears twice (first at line {seen[key]})")
            seen.setdefault(key, line_at(self.data, loc))


def _run_fields(c: _Checker) -> None:
    spec: m.RunFieldsFile = c.spec
    for i, b in enumerate(spec.variables):
        loc = ("variables", i)
        c.name((*loc, "variable"), b.variable)
        if b.units is not None:
            c.value((*loc, "units"), b.variable, m.Quantity(value=1, units=b.units))
        if b.read == "boolean" and b.values is None:
            c.value((*loc, "read"), b.variable, 1)
        for key, value in (b.values or {}).items():
            c.value((*loc, "values", key), b.variable, value)
    c.unique([(("variables", i, "variable"), b.variable) for i, b in enumerate(spec.variables)], "variable")
    c.unique([(("variables", i, "sweep"), b.sweep) for i, b in enumerate(spec.variables) if b.sweep], "sweep axis")
    for i, b in enumerate(spec.modes):
        keys = {"always": b.always, "present": b.present, "absent": b.absent}
        for part, key in keys.items():
            if key is not None:
                c.mode(("modes", i, part), key)
        for value, key in (b.values or {}).items():
            c.mode(("modes", i, "values", value), key)


def _measured_runs(c: _Checker) -> None:
    spec: m.MeasuredRunsFile = c.spec
    c.unique([(("columns", i, "column"), col.column) for i, col in enumerate(spec.columns)], "column")
    for key, hw in spec.hardware.items():
        for i, preset in enumerate(hw.presets):
            c.preset(("hardware", key, "presets", i), preset)
        c.refs(("hardware", key), hw.references, f"hardware key {key}")
    for key, p in spec.precision.items():
        c.preset(("precision", key, "preset"), p.preset)
        c.refs(("precision", key), p.references, f"precision key {key}")
    c.unique([(("measures", i, "column"), ms.column) for i, ms in enumerate(spec.measures)], "measure column")
    for i, measure in enumerate(spec.measures):
        if measure.variable is not None:
            c.name(("measures", i, "variable"), measure.variable)
        for convention, name in (measure.by_convention or {}).items():
            c.name(("measures", i, "by_convention", convention), name)
    if spec.convention_column is None and any(ms.by_convention for ms in spec.measures):
        c.add(("measures",), "binding.invalid-value", "a measure by convention needs `convention_column`")
    claimed: dict[str, str] = {}
    for convention, fc in spec.flop_conventions.items():
        c.refs(("flop_conventions", convention), fc.references, f"FLOP convention {convention}")
        for i, name in enumerate(fc.variables):
            c.name(("flop_conventions", convention, "variables", i), name)
            if name in claimed:
                c.add(("flop_conventions", convention, "variables", i), "binding.duplicate",
                      f"`{name}` is already counted by the {claimed[name]} convention")
            claimed.setdefault(name, convention)
    d = spec.defaults
    for i, f in enumerate(d.fields):
        c.refs(("defaults", "fields", i), f.references, f"row default {f.field}")
    for i, p in enumerate(d.presets):
        c.preset(("defaults", "presets", i, "preset"), p.preset)
        c.refs(("defaults", "presets", i), p.references, f"row default preset {p.preset}")
    for i, a in enumerate(d.assignments):
        c.name(("defaults", "assignments", i, "variable"), a.variable)
        c.value(("defaults", "assignments", i, "value"), a.variable, a.value)
        c.refs(("defaults", "assignments", i), a.references, f"row default {a.variable}")


def _figures(c: _Checker) -> None:
    spec: m.FiguresFile = c.spec
    for i, f in enumerate(spec.figures):
        c.name(("figures", i, "variable"), f.variable)
    c.unique([(("figures", i, "label"), f.label) for i, f in enumerate(spec.figures)], "figure label")
    mem = spec.memory
    for part in ("per_gpu", "capacity", "buffers"):
        c.name(("memory", part), getattr(mem, part))
    for i, name in enumerate(mem.parts):
        c.name(("memory", "parts", i), name)
    for key, objective in spec.objectives.items():
        c.name(("objectives", key, "variable"), objective.variable)
    if spec.breakdowns is not None:
        for part in ("step", "cost"):
            bd = getattr(spec.breakdowns, part)
            c.name(("breakdowns", part, "variable"), bd.variable)
            for i, g in enumerate(bd.groups):
                c.name(("breakdowns", part, "groups", i, "variable"), g.variable)
            c.unique([(("breakdowns", part, "groups", i, "variable"), g.variable) for i, g in enumerate(bd.groups)],
                     "grouped part")


def _fitted_roots(c: _Checker, at: tuple, parameters: list, what: str) -> list:
    """Each fitted parameter's key unique (a `what`) and its roots named; the roots with their locations."""
    c.unique([((*at, i, "key"), p.key) for i, p in enumerate(parameters)], what)
    roots = [((*at, j, "roots", i), root) for j, p in enumerate(parameters) for i, root in enumerate(p.roots)]
    for loc, root in roots:
        c.name(loc, root)
    return roots


def _held_values(c: _Checker, at: tuple, held: list) -> list:
    """Each held value's variable named, its value in the variable's units, its references known; the held
    variables with their locations."""
    for i, h in enumerate(held):
        c.name((*at, i, "variable"), h.variable)
        c.value((*at, i, "value"), h.variable, m.Quantity(value=h.value, units=h.units))
        c.refs((*at, i), h.references, f"held value {h.variable}")
    return [((*at, i, "variable"), h.variable) for i, h in enumerate(held)]


def _calibration_fit(c: _Checker) -> None:
    spec: m.CalibrationFitFile = c.spec
    c.unique(_fitted_roots(c, ("parameters",), spec.parameters, "parameter") + _held_values(c, ("held",), spec.held),
             "fitted or held root")
    if spec.learning is not None:
        c.name(("learning", "target"), spec.learning.target)
        c.unique(_fitted_roots(c, ("learning", "parameters"), spec.learning.parameters, "learning parameter")
                 + _held_values(c, ("learning", "held"), spec.learning.held), "learning fitted or held root")
    comp = spec.components
    if comp is None:
        return
    comp_roots = _fitted_roots(c, ("components", "parameters"), comp.parameters, "component parameter")
    c.unique(comp_roots, "component root")
    c.unique([(("components", "generations", i, "key"), g.key) for i, g in enumerate(comp.generations)],
             "generation")
    c.unique([(("components", "generations", i, "preset"), g.preset) for i, g in enumerate(comp.generations)],
             "generation preset")
    for i, g in enumerate(comp.generations):
        for j, name in enumerate(g.gpu_presets):
            c.preset(("components", "generations", i, "gpu_presets", j), name)
        c.unique(_held_values(c, ("components", "generations", i, "held"), g.held), "held root")


def _serve_figures(c: _Checker) -> None:
    spec: m.ServeFiguresFile = c.spec
    for i, f in enumerate(spec.figures):
        c.name(("figures", i, "variable"), f.variable)
    c.unique([(("figures", i, "label"), f.label) for i, f in enumerate(spec.figures)], "figure label")
    for i, r in enumerate(spec.requirements):
        c.name(("requirements", i, "variable"), r.variable)
        part, limit = r.limit
        if isinstance(limit, str):
            c.name(("requirements", i, part), limit)
        else:
            c.value(("requirements", i, part), r.variable, limit)
    for key, objective in spec.objectives.items():
        c.name(("objectives", key, "variable"), objective.variable)


def _serve_replay(c: _Checker) -> None:
    spec: m.ServeReplayFile = c.spec
    for i, p in enumerate(spec.parameters):
        c.name(("parameters", i, "variable"), p.variable)
    c.unique([(("parameters", i, "field"), p.field) for i, p in enumerate(spec.parameters)], "replay parameter")


def _training_replay(c: _Checker) -> None:
    spec: m.TrainingReplayFile = c.spec
    for i, p in enumerate(spec.parameters):
        c.name(("parameters", i, "variable"), p.variable)
    c.unique([(("parameters", i, "field"), p.field) for i, p in enumerate(spec.parameters)], "replay parameter")
    c.name(("model_sync", "params"), spec.model_sync.params)
    c.name(("model_sync", "bytes_per_param"), spec.model_sync.bytes_per_param)
    c.name(("job_failure_rate", "variable"), spec.job_failure_rate.variable)
    c.mode(("job_failure_rate", "fleet_variant"), spec.job_failure_rate.fleet_variant)
    classes = [(("fleet_class",), spec.fleet_class)] + [(("failure_classes", i), f)
                                                        for i, f in enumerate(spec.failure_classes)]
    for loc, f in classes:
        c.name((*loc, "rate"), f.rate)
        if f.count is not None:
            c.name((*loc, "count"), f.count)
    for i, a in enumerate(spec.aggregate_classes):
        c.name(("aggregate_classes", i, "rate"), a.rate)
    c.unique([((*loc, "name"), f.name) for loc, f in classes]
             + [(("aggregate_classes", i, "name"), a.name) for i, a in enumerate(spec.aggregate_classes)],
             "failure class")
    component = {f.name for f in spec.failure_classes}
    claimed: set[str] = set()
    for i, a in enumerate(spec.aggregate_classes):
        for j, part in enumerate(a.parts):
            at = ("aggregate_classes", i, "parts", j)
            if part not in component:
                c.add(at, "binding.unknown-class",
                      with_suggestion(f"no failure class is named `{part}`", part, sorted(component)))
            elif part in claimed:
                c.add(at, "binding.duplicate", f"failure class `{part}` is already in another aggregate")
            claimed.add(part)


CHECKS = {"run_fields": _run_fields, "measured_runs": _measured_runs, "figures": _figures,
          "calibration_fit": _calibration_fit, "serve_fields": _run_fields, "serve_figures": _serve_figures,
          "serve_replay": _serve_replay, "training_replay": _training_replay}


def check_bindings(cat: Catalog) -> None:
    for kind in cat.bindings:
        CHECKS[kind](_Checker(cat, kind))


def binding_tables(cat: Catalog) -> dict[str, dict]:
    """The bindings for the manifest: each file's content, with its file and the line of every list entry
    (the engine's own errors point there)."""
    return {kind: {**_with_lines(e.spec.model_dump(mode="json", exclude_none=True), e.data), "file": e.loc.file}
            for kind, e in sorted(cat.bindings.items())}


def _with_lines(dumped, raw):
    """`dumped` (a validated file) with the line of every mapping in a list, from `raw` (the file as read)."""
    if isinstance(dumped, dict):
        return {k: _with_lines(v, raw.get(k) if isinstance(raw, LinedDict) else None) for k, v in dumped.items()}
    if isinstance(dumped, list) and isinstance(raw, LinedList):
        return [{**_with_lines(v, raw[i]), "line": raw.line_of(i)} if isinstance(v, dict) else v
                for i, v in enumerate(dumped)]
    return dumped
