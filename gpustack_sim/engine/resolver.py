"""Resolve a target through the catalog: one selected defining relation per variable, evaluated in
dependency order, only as far as needed, with a trace. Missing roots are never filled in: the value
stays symbolic in them. Values are carried in coherent base units and shown in declared units.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import sympy

from gpustack_compiler.base.errors import InputError, ResolveError
from gpustack_compiler.language.expressions import SympyBuilder, parse
from gpustack_compiler.language.kinds import CONDITIONAL, CONSTRAINT, EXACT, KEYED, kind_of
from gpustack_compiler.language.kinds.distributions import RandomValue
from gpustack_compiler.language.kinds.evaluation import UndefinedValue, by_name, sympify
from gpustack_compiler.language.symbolic import symbol_for
from gpustack_compiler.language.units import UnitSystem
from gpustack_compiler.manifest.records import VariableRecord
from gpustack_compiler.manifest.source import GraphSource

from .domain import domain_checks
from .scenario import Scenario


@dataclass
class Step:
    """One step of a trace. Values are kept as computed (base units) and shown in declared units only when
    rendered: turning large symbolic values into text on every step would dominate a resolution."""

    variable: str
    relation: str | None
    kind: str
    variant: str | None
    raw_inputs: dict[str, tuple[object, float]]  # name -> (value in base units, scale of its unit)
    raw_value: object
    scale: float
    units: str
    note: str | None = None

    @property
    def inputs(self) -> dict[str, float | str]:
        return {k: _show(v, sc) for k, (v, sc) in self.raw_inputs.items()}

    @property
    def value(self) -> float | str:
        return _show(self.raw_value, self.scale)

    def to_dict(self) -> dict:
        return {"variable": self.variable, "relation": self.relation, "kind": self.kind, "variant": self.variant,
                "inputs": self.inputs, "value": self.value, "units": self.units, "note": self.note}


@dataclass
class Check:
    name: str
    kind: str  # constraint, bounds, assumption, validity
    status: str  # satisfied, violated, undetermined
    detail: str

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class Resolution:
    target: str
    value: float | None
    scale: float  # of the declared unit, to show a symbolic value in it
    units: str
    trace: list[Step] = field(default_factory=list)
    missing: dict[str, dict] = field(default_factory=dict)  # root -> {family, category}
    checks: list[Check] = field(default_factory=list)
    fallbacks: list[str] = field(default_factory=list)
    solved: dict[str, float] = field(default_factory=dict)
    symbolic: sympy.Basic | None = None  # the value in base units when it depends on missing roots
    # Intermediate variables that stand as their own symbol in `symbolic`, in dependency order: large
    # symbolic values cut out (Resolver.resolve_many(stage_limit=...)) and, under Monte Carlo, the draws of
    # stochastic relations.
    stages: dict[str, sympy.Basic | RandomValue] = field(default_factory=dict)
    random: dict[str, RandomValue] = field(default_factory=dict)  # stochastic relations in the trace
    # Variables whose relation (iterative, differential) could not be evaluated: the value stands in their
    # own symbol, so it is no answer even where nothing is missing. Name -> the missing roots behind it.
    unevaluated: dict[str, list[str]] = field(default_factory=dict)

    @property
    def expression(self) -> str | None:
        """The symbolic value in declared units, as text (made only when asked for)."""
        if self.symbolic is None:
            return None
        return str(self.symbolic / self.scale if self.scale != 1 else self.symbolic)

    @property
    def violated(self) -> list[Check]:
        return [c for c in self.checks if c.status == "violated"]

    def missing_by_family(self) -> dict[str, dict]:
        out: dict[str, dict] = {}
        for name, meta in sorted(self.missing.items()):
            fam = out.setdefault(meta.get("family") or "(undeclared)",
                                 {"category": meta.get("category"), "roots": []})
            fam["roots"].append(name)
        return out

    def to_dict(self) -> dict:
        return {
            "target": self.target, "value": self.value, "expression": self.expression, "units": self.units,
            "missing": sorted(self.missing), "missing_by_family": self.missing_by_family(),
            "trace": [s.to_dict() for s in self.trace], "checks": [c.to_dict() for c in self.checks],
            "fallbacks": self.fallbacks, "solved": self.solved, "unevaluated": self.unevaluated,
        }


class Resolver:
    """Holds parsed relations between calls, so repeated resolutions are fast."""

    def __init__(self, source: GraphSource, units: UnitSystem, parsed: dict | None = None):
        self.source = source
        self.units = units
        self._symbols: dict[str, sympy.Symbol] = {}
        # `parsed` may come filled from an earlier run (engine/cache.py)
        self._exprs: dict[tuple[str, str], sympy.Basic] = parsed if parsed is not None else {}
        self._subgraphs: dict[str, dict] = {}
        self._functions: dict[tuple, object] = {}  # (relation, part, argument names) -> compiled function
        # Records of the variables of every subgraph fetched: an expression names hundreds of them, and
        # asking the source for each would be a round trip each to Neo4j.
        self._variables: dict[str, VariableRecord] = {}

    @property
    def memo(self) -> dict:
        """What is kept between runs with the parsed relations (engine/cache.py): an analysis stores its
        own results here under keys of its own, tuples that name it first."""
        return self._exprs

    def variable(self, name: str) -> VariableRecord | None:
        """A variable's record, from the subgraphs already fetched when it is in one."""
        meta = self._variables.get(name)
        if meta is None:
            meta = self.source.variable(name)
            if meta is not None:
                self._variables[name] = meta
        return meta

    # ---- sympy helpers -----------------------------------------------------------------------
    def symbol(self, name: str) -> sympy.Symbol:
        s = self._symbols.get(name)
        if s is None:
            meta = self.variable(name)
            assumptions = meta.assumptions if meta is not None else ("positive",)
            s = self._symbols[name] = symbol_for(name, assumptions)
        return s

    def _expr(self, rel: dict, label: str) -> sympy.Basic:
        key = (rel["name"], label)
        e = self._exprs.get(key)
        if e is None:
            builder = SympyBuilder(self.symbol, lambda u: self.units.parse(u).scale)
            e = self._exprs[key] = builder.build(parse(rel["parts"][label]))
        return e

    def _subgraph(self, target: str) -> dict:
        sub = self._subgraphs.get(target)
        if sub is None:
            sub = self._subgraphs[target] = self.source.subgraph(target)
            self._variables.update(sub["variables"])
        return sub

    # ---- selection ---------------------------------------------------------------------------
    def select(self, var: str, defs: list[dict], variants: dict[str, str], modes: list[str] = ()) -> dict | None:
        if not defs:
            return None
        by_role: dict[str, list[dict]] = {}
        for d in defs:
            by_role.setdefault(kind_of(d).role, []).append(d)
        exact = by_role.get(EXACT, [])
        if len(exact) == 1:
            return exact[0]
        if len(exact) > 1:
            raise ResolveError(f"`{var}` has several exact definitions: {', '.join(d['name'] for d in exact)}")
        chosen = variants.get(var)
        if chosen is not None:
            for d in defs:
                if d.get("variant") == chosen or d["name"] == chosen:
                    return d
            keys = sorted(d["variant"] for d in by_role.get(KEYED, []))
            raise ResolveError(f"`{var}` has no variant `{chosen}`", f"choices: {', '.join(keys) or 'none'}")
        vdefs = by_role.get(KEYED, [])
        by_mode = [d for d in vdefs if d["variant"] in modes]
        if len(by_mode) == 1:
            return by_mode[0]
        if len(by_mode) > 1:
            raise ResolveError(f"`{var}`: modes {', '.join(d['variant'] for d in by_mode)} both apply",
                               f"--variant {var}=KEY to choose")
        if vdefs:
            keys = ", ".join(sorted(d["variant"] for d in vdefs))
            raise ResolveError(f"`{var}` needs a variant selection", f"--variant {var}=KEY with KEY one of: {keys}")
        approx = by_role.get(CONDITIONAL, [])
        if len(approx) == 1:
            return approx[0]
        raise ResolveError(f"`{var}` is ambiguous: {', '.join(d['name'] for d in approx)}",
                           f"--variant {var}=RELATION_NAME")

    # ---- resolution --------------------------------------------------------------------------
    def resolve_many(self, targets: list[str], scenario: Scenario, stage_limit: int | None = None,
                     monte_carlo: bool = False, conditions: dict | None = None,
                     ) -> dict[str, Resolution | ResolveError]:
        """Several targets in one run, so shared upstream work is done once; each target gets the part of
        the trace in its own cone, or the error that stopped it.

        With `stage_limit`, a symbolic value larger than that many nodes is cut out and stands as its own
        symbol downstream (`Resolution.stages`): building one huge expression costs sympy seconds of
        simplification that a numeric evaluation of the stages in order never needs. With `monte_carlo`, a
        stochastic relation's variable is a stage too, to be drawn, instead of its distribution's mean.
        `conditions`, when given, receives the constraints and validity conditions met on the way that the
        scenario does not satisfy: name -> (kind, condition, the stages it goes through), the condition false
        where violated, symbolic in the held or missing variables where undetermined, to be judged where their
        values are given (a sweep's layouts)."""
        subs = {t: self._subgraph(t) for t in targets}
        run = _Run(self, _merge(list(subs.values())), scenario, False, stage_limit=stage_limit, sampling=monte_carlo)
        values: dict[str, object] = {}
        for target in targets:
            try:
                values[target] = run.value_of(target)
            except ResolveError as exc:
                values[target] = exc
        run.check_constraints()
        if conditions is not None:
            for name, (kind, held) in sorted(run.open_conditions.items()):
                used = _free_names(held, run.stages)[1]
                conditions[name] = (kind, held, {k: v for k, v in run.stages.items() if k in used})
        out: dict[str, Resolution | ResolveError] = {}
        for target, value in values.items():
            if isinstance(value, ResolveError):
                out[target] = value
                continue
            cone = set(subs[target]["variables"]) | set(subs[target]["constants"])
            out[target] = self._result(target, value, run, [s for s in run.trace if s.variable in cone], scenario)
        return out

    def resolve(self, target: str, scenario: Scenario, fallback_on_invalid: bool = False,
                solve: bool = False) -> Resolution:
        meta = self.variable(target)
        if meta is None:
            raise InputError(f"unknown variable `{target}`")
        sub = self._subgraph(target)
        run = _Run(self, sub, scenario, fallback_on_invalid)
        value = run.value_of(target)
        if solve and run.missing:
            # An equation that pins a missing root usually defines an assigned variable downstream.
            wide = _merge([sub, *(self._subgraph(n) for n in sorted(scenario.assignments))])
            scratch = _Run(self, wide, scenario, fallback_on_invalid)
            scratch.value_of(target)
            solved = scratch.solve_missing(set(run.missing))
            if solved:
                run = _Run(self, wide, scenario, fallback_on_invalid, solved)
                value = run.value_of(target)
        run.check_constraints()
        return self._result(target, value, run, run.trace, scenario)

    def _result(self, target: str, value, run: _Run, trace: list, scenario: Scenario) -> Resolution:
        meta = self.variable(target)
        solved = {k: v / self.variable(k).scale for k, v in run.solved.items()}
        # Missing means the value is still symbolic in it: a root that cancels out is not missing.
        depends, stages, unevaluated = set(), {}, {}
        if not isinstance(value, float):
            # An unevaluated relation's symbol leads on to what it waits on, as a stage leads to its value.
            depends, used = _free_names(value, {**run.pending, **run.stages})
            stages = {k: v for k, v in run.stages.items() if k in used}
            unevaluated = {k: sorted(set(run.missing) & _free_names(run.pending[k], {**run.pending, **run.stages})[0])
                           for k in sorted(used & set(run.pending))}
        missing = {k: v for k, v in run.missing_meta().items() if k in depends}
        for name in depends & scenario.sampled:
            missing.pop(name, None)
        random = {s.variable: run.randoms[s.variable] for s in trace if s.variable in run.randoms}
        res = Resolution(target, None, meta.scale, meta.units, trace, missing, run.checks, run.fallbacks, solved,
                         stages=stages, random=random, unevaluated=unevaluated)
        if isinstance(value, float):
            res.value = value / meta.scale
        else:
            res.symbolic = value
        return res


class _Run:
    """One resolution: values in base units (floats) or sympy expressions in missing roots. It is the
    evaluation context through which each relation kind evaluates its relations."""

    def __init__(self, resolver: Resolver, sub: dict, scenario: Scenario, fallback: bool,
                 solved: dict[str, float] | None = None, stage_limit: int | None = None, sampling: bool = False):
        self.r = resolver
        self.stage_limit = stage_limit
        self.sampling = sampling
        self.stages: dict[str, sympy.Basic | RandomValue] = {}
        self.randoms: dict[str, RandomValue] = {}
        self.pending: dict[str, sympy.Basic] = {}
        self.sub = sub
        self.scenario = scenario
        self.fallback = fallback
        self.values: dict[str, float | sympy.Basic] = {}
        self.trace: list[Step] = []
        self.checks: list[Check] = []
        # Conditions not satisfied, the undetermined ones still symbolic (in held or missing variables): a
        # sweep judges them on its layouts.
        self.open_conditions: dict[str, tuple[str, sympy.Basic]] = {}
        self.fallbacks: list[str] = []
        self.missing: set[str] = set()
        self.solved: dict[str, float] = dict(solved or {})
        self.defs: dict[str, list[dict]] = {}
        for rel in sub["relations"].values():
            if kind_of(rel).role != CONSTRAINT:
                self.defs.setdefault(rel["defines"], []).append(rel)

    def var_meta(self, name: str) -> VariableRecord:
        return self.sub["variables"].get(name) or self.r.variable(name)

    def value_of(self, name: str):
        if name in self.values:
            return self.values[name]
        if name in self.sub["constants"]:
            const = self.sub["constants"][name]
            self.values[name] = const.si_value
            return self.values[name]
        if name in self.solved:
            return self._record(name, None, "solved", None, {}, self.solved[name], "solved with --solve")
        if name in self.scenario.sampled:
            return self._record(name, None, "sampled", None, {}, self.r.symbol(name), "Monte Carlo input")
        if name in self.scenario.assignments:
            a = self.scenario.assignments[name]
            return self._record(name, None, "assigned", None, {}, a.value, f"{a.given} from {a.origin}")
        rel = self.r.select(name, self.defs.get(name, []), self.scenario.variants, self.scenario.modes)
        if rel is None:
            self.missing.add(name)
            self.values[name] = self.r.symbol(name)
            return self.values[name]
        kind = kind_of(rel)
        out = self._evaluate(rel)
        validity = kind.validity(rel, self)
        if validity is not None:
            self._check(rel["name"], "validity", *validity)
            if validity[0] == "violated" and self.fallback:
                alt = self.alternative(name, rel)
                if alt is not None:
                    self.fallbacks.append(f"{name}: {rel['name']} -> {alt['name']}")
                    out = self._evaluate(alt)
                    out.note = f"fallback from {rel['name']} (validity violated)"
                    rel = alt
        return self._record(name, rel["name"], rel["kind"], rel.get("variant"), out.inputs, out.value, out.note)

    def _evaluate(self, rel: dict):
        try:
            return kind_of(rel).evaluate(rel, self)
        except UndefinedValue as exc:
            raise ResolveError(f"{rel['name']} cannot be evaluated at these inputs: {exc.message}") from None

    def _record(self, name, rel, kind, variant, inputs, value, note):
        meta = self.var_meta(name)
        if self.stage_limit and rel is not None and not isinstance(value, float) and _larger(value, self.stage_limit):
            self.stages[name] = value
            self.values[name] = self.r.symbol(name)
        else:
            self.values[name] = value
        raw = {k: (v, self.scale(k)) for k, v in inputs.items()}
        self.trace.append(Step(name, rel, kind, variant, raw, value, meta.scale, meta.units, note))
        self.check_domain(name, value)
        return self.values[name]

    def scale(self, name: str) -> float:
        if name in self.sub["constants"]:
            return self.sub["constants"][name].scale
        return self.var_meta(name).scale

    def alternative(self, name: str, failed: dict) -> dict | None:
        for rel in sorted(self.defs.get(name, []), key=lambda r: r["name"]):
            if rel["name"] == failed["name"]:
                continue
            validity = kind_of(rel).validity(rel, self)
            if validity is None or validity[0] != "violated":
                return rel
        return None

    # ---- the evaluation context of the relation kinds ------------------------------------------
    def expr(self, rel: dict, label: str) -> sympy.Basic:
        return self.r._expr(rel, label)

    def symbol(self, name: str) -> sympy.Symbol:
        return self.r.symbol(name)

    def numeric(self, rel: dict, label: str, names: tuple[str, ...]):
        key = (rel["name"], label, names)
        fn = self.r._functions.get(key)
        if fn is None:
            fn = self.r._functions[key] = sympy.lambdify([self.r.symbol(n) for n in names], self.r._expr(rel, label),
                                                         modules="math")
        return fn

    def random(self, name: str, value: RandomValue) -> sympy.Symbol | None:
        self.randoms[name] = value
        if not self.sampling:
            return None
        self.stages[name] = value
        return self.r.symbol(name)

    def unevaluated(self, name: str, pending: sympy.Basic) -> None:
        self.pending[name] = pending

    # ---- checks ------------------------------------------------------------------------------
    def check_domain(self, name: str, value) -> None:
        if isinstance(value, float):
            self.checks.extend(Check(name, *c) for c in domain_checks(self.var_meta(name), value))

    def check_constraints(self) -> None:
        touched = set(self.values)
        for name, rel in sorted(self.sub["relations"].items()):
            kind = kind_of(rel)
            if kind.role != CONSTRAINT or not set(rel["constrains"]) & touched:
                continue
            self._check(name, "constraint", *kind.check(rel, self))

    def _check(self, name: str, kind: str, status: str, detail: str, held) -> None:
        self.checks.append(Check(name, kind, status, detail))
        if status != "satisfied":
            self.open_conditions[name] = (kind, held if status == "undetermined" else sympy.false)

    def known(self, name: str):
        """A value without resolving anything new: evaluated, assigned, or a constant."""
        if name in self.values:
            return self.values[name]
        if name in self.scenario.assignments:
            return self.scenario.assignments[name].value
        const = self.sub["constants"].get(name) or self.r.source.constant(name)
        return const.si_value if const else None

    def missing_meta(self) -> dict[str, dict]:
        out = {}
        for name in sorted(self.missing):
            if name in self.solved:
                continue
            root = self.var_meta(name).root
            out[name] = {"family": root and root.family, "category": root and root.category}
        return out

    # ---- --solve -----------------------------------------------------------------------------
    def solve_missing(self, wanted: set[str]) -> dict[str, float]:
        """Assigned variables' own definitions become equations in the `wanted` missing roots; a small
        group with a unique real solution is solved together. Returns the solution (base units)."""
        equations, unknowns = [], set()
        for name, assigned in sorted(self.scenario.assignments.items()):
            try:
                rel = self.r.select(name, self.defs.get(name, []), self.scenario.variants, self.scenario.modes)
                rhs = kind_of(rel).equation(rel, self) if rel is not None else None
                if rhs is None:
                    continue
                subs = {s: self.value_of(s.name) for s in by_name(rhs.free_symbols)}
            except ResolveError:
                continue  # a definition that cannot be evaluated pins nothing
            eq = rhs.xreplace(sympify(subs)) - assigned.value
            free = {s.name for s in eq.free_symbols}
            if free and free <= wanted:
                equations.append(eq)
                unknowns |= free
        if not equations or len(unknowns) > 4 or len(equations) < len(unknowns):
            return {}
        symbols = [self.r.symbol(n) for n in sorted(unknowns)]
        solutions = sympy.solve(equations, symbols, dict=True)
        real = [s for s in solutions if all(v.is_number and v.is_real is not False for v in s.values())]
        if len(real) != 1:
            return {}
        return {sym.name: float(val) for sym, val in real[0].items()}


def _merge(subgraphs: list[dict]) -> dict:
    merged = {"target": subgraphs[0]["target"], "variables": {}, "constants": {}, "relations": {}}
    for sub in subgraphs:
        for key in ("variables", "constants", "relations"):
            merged[key].update(sub[key])
    return merged


def _larger(expr, limit: int) -> bool:
    for i, _ in enumerate(sympy.preorder_traversal(expr)):
        if i >= limit:
            return True
    return False


def _free_names(value, stages: dict) -> tuple[set[str], set[str]]:
    """Names a staged value finally depends on, and the stages it goes through (a drawn stage depends on
    what its distribution's parameters depend on)."""
    names, used, todo = set(), set(), [value]
    while todo:
        for sym in todo.pop().free_symbols:
            if sym.name in stages:
                if sym.name not in used:
                    used.add(sym.name)
                    todo.append(stages[sym.name])
            else:
                names.add(sym.name)
    return names, used


def _show(value, scale: float):
    return value / scale if isinstance(value, float) else str(value / scale if scale != 1 else value)
