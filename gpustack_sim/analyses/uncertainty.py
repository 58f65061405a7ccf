"""Uncertainty by vectorized Monte Carlo: sampled roots are left symbolic, the resolved expression is
compiled once with sympy's lambdify and evaluated with numpy on seeded samples.

Distributions are written `NAME~normal(mu, sd)`, `NAME~lognormal(median, sigma)` (sigma of the
logarithm), `NAME~uniform(low, high)`; parameters may carry units (`normal(0.5 kW, 50 W)`). The text
is read with a regular expression and the quantity parser, never evaluated.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

import numpy as np
import sympy

from gpustack_compiler.errors import InputError

from ..engine.resolver import Resolution, ResolveError, Resolver
from ..engine.scenario import Scenario, ScenarioBuilder

SPEC = re.compile(r"^\s*([a-z][a-z0-9_.]*)\s*~\s*(normal|lognormal|uniform)\s*\((.*)\)\s*$")
PARAMS = {"normal": ("mu", "sd"), "lognormal": ("median", "sigma"), "uniform": ("low", "high")}
PERCENTILES = (5, 50, 95)


@dataclass(frozen=True)
class Distribution:
    name: str
    kind: str
    a: float  # base units (sigma of lognormal is dimensionless)
    b: float

    def draw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        if self.kind == "normal":
            return rng.normal(self.a, self.b, n)
        if self.kind == "lognormal":
            return self.a * np.exp(rng.normal(0.0, self.b, n))
        return rng.uniform(self.a, self.b, n)

    def describe(self, scale: float) -> str:
        if self.kind == "lognormal":
            return f"lognormal(median {self.a / scale:g}, sigma {self.b:g})"
        return f"{self.kind}({self.a / scale:g}, {self.b / scale:g})"


def parse_spec(text: str, scenarios: ScenarioBuilder) -> Distribution:
    match = SPEC.match(text)
    if not match:
        raise InputError(f"--sample {text!r}: expected NAME~normal(mu, sd), NAME~lognormal(median, sigma) "
                         "or NAME~uniform(low, high)")
    name, kind, args = match.groups()
    parts = [p.strip() for p in args.split(",")]
    if len(parts) != 2 or not all(parts):
        raise InputError(f"--sample {text!r}: {kind} takes two parameters ({', '.join(PARAMS[kind])})")
    first = scenarios.quantity(name, parts[0], "--sample").value
    if kind == "lognormal":
        try:
            second = float(parts[1])
        except ValueError:
            raise InputError(f"--sample {text!r}: sigma of a lognormal is a plain number") from None
    else:
        second = scenarios.quantity(name, parts[1], "--sample").value
    if kind == "normal" and second < 0 or kind == "lognormal" and (first <= 0 or second < 0):
        raise InputError(f"--sample {text!r}: parameters out of range")
    if kind == "uniform" and second < first:
        raise InputError(f"--sample {text!r}: uniform needs low <= high")
    return Distribution(name, kind, first, second)


_VMIN, _VMAX = sympy.Function("vmin"), sympy.Function("vmax")
_ELEMENTWISE = {"vmin": lambda *a: functools.reduce(np.minimum, a), "vmax": lambda *a: functools.reduce(np.maximum, a)}


def vectorize(symbols: list, expr: sympy.Basic):
    """Compile `expr` to a numpy function of `symbols`, elementwise throughout: lambdify's Min/Max stack
    their arguments, which fails when one is a scalar and another an array."""
    args = [sympy.Symbol(f"x{i}") for i in range(len(symbols))]
    rebuilt = _for_numpy(expr, dict(zip(symbols, args)), {})
    # The numpy module itself, not "numpy": lambdify then runs `from numpy import *`, which with numpy 2
    # imports every numpy submodule (f2py, testing, ...). No docstring: its text would cost a third of
    # the compile.
    return sympy.lambdify(args, rebuilt, modules=[_ELEMENTWISE, np], docstring_limit=0)


# Symbolic values larger than this many nodes are cut into stages when a resolution is compiled for numpy.
STAGE_LIMIT = 200


def vectorize_resolution(symbols: list, res: Resolution, zero: tuple[str, ...] = (), compiled: dict | None = None):
    """A numpy function of `symbols` for a symbolic resolution. A staged one is compiled stage by stage
    (once per `compiled` cache, which several targets of one run may share) and evaluated in dependency
    order, then the target from the stages. Names in `zero` read as 0."""
    compiled = {} if compiled is None else compiled
    steps = []
    for name, expr in res.stages.items():
        if name not in compiled:
            args = sorted(expr.free_symbols, key=lambda s: s.name)
            compiled[name] = ([a.name for a in args], vectorize(args, expr))
        steps.append((name, *compiled[name]))
    args = sorted(res.symbolic.free_symbols, key=lambda s: s.name)
    steps.append((None, [a.name for a in args], vectorize(args, res.symbolic)))

    def fn(*arrays):
        env = {s.name: a for s, a in zip(symbols, arrays)}
        env.update({n: 0.0 for n in zero})
        for name, needs, f in steps:
            env[name] = f(*(env[a] for a in needs))
        return env[None]
    return fn


def _for_numpy(expr: sympy.Basic, names: dict, seen: dict) -> sympy.Basic:
    """The expression with Min/Max made elementwise and the (dotted) catalog names made identifiers, rebuilt
    without evaluation: re-simplifying a large symbolic tree, and lambdify renaming arguments that are not
    identifiers, each cost more than compiling it."""
    if expr in names:
        return names[expr]
    if not expr.args:
        return expr
    if expr in seen:
        return seen[expr]
    args = [_for_numpy(a, names, seen) for a in expr.args]
    func = _VMIN if expr.func is sympy.Min else _VMAX if expr.func is sympy.Max else expr.func
    try:
        out = func(*args, evaluate=False)
    except TypeError:  # a few node types (ExprCondPair) take no evaluate flag
        out = func(*args)
    seen[expr] = out
    return out


def percentiles(values: np.ndarray) -> dict[int, float]:
    return {p: float(v) for p, v in zip(PERCENTILES, np.percentile(values, PERCENTILES))}


@dataclass
class Summary:
    target: str
    units: str
    samples: int
    seed: int
    mean: float
    sd: float
    percentiles: dict[int, float]
    inputs: dict[str, str]
    nonfinite: int

    def to_dict(self) -> dict:
        return {"target": self.target, "units": self.units, "samples": self.samples, "seed": self.seed,
                "mean": self.mean, "sd": self.sd, **{f"p{k}": v for k, v in self.percentiles.items()},
                "inputs": self.inputs, "nonfinite": self.nonfinite}


class MonteCarlo:
    """Compiles a target's expression in the sampled roots once; evaluates it on sample arrays."""

    def __init__(self, resolver: Resolver):
        self.resolver = resolver

    def compile(self, target: str, scenario: Scenario, sampled: list[str]):
        """The target as a numpy function of the sampled roots (in base units), plus the resolution."""
        if self.resolver.source.variable(target) is None:
            raise InputError(f"unknown variable `{target}`")
        held = scenario.holding(sampled)
        res = self.resolver.resolve_many([target], held, stage_limit=STAGE_LIMIT)[target]
        if isinstance(res, ResolveError):
            raise res
        others = sorted(res.missing)
        if others:
            raise InputError(f"{target} still depends on unassigned roots: {', '.join(others)}",
                             "assign them or sample them too")
        meta = self.resolver.source.variable(target)
        if res.value is not None:
            return (lambda *arrays: np.full(len(arrays[0]) if arrays else 1, res.value * meta["scale"])), res
        symbols = [self.resolver.symbol(n) for n in sampled]
        return vectorize_resolution(symbols, res), res

    def run(self, target: str, scenario: Scenario, dists: list[Distribution], n: int, seed: int) -> Summary:
        if n < 2:
            raise InputError("--samples must be at least 2")
        names = [d.name for d in dists]
        if len(set(names)) != len(names):
            raise InputError("each variable may be sampled once")
        fn, _ = self.compile(target, scenario, names)
        rng = np.random.Generator(np.random.PCG64(seed))
        draws = [d.draw(rng, n) for d in dists]
        values = np.broadcast_to(np.asarray(fn(*draws), dtype=float), (n,))
        meta = self.resolver.source.variable(target)
        shown = values / meta["scale"]
        finite = shown[np.isfinite(shown)]
        if finite.size == 0:
            raise InputError(f"no finite value of {target} in {n} samples")
        pct = percentiles(finite)
        inputs = {d.name: d.describe(self.resolver.source.variable(d.name)["scale"]) for d in dists}
        return Summary(target, meta["units"], n, seed, float(finite.mean()), float(finite.std(ddof=1)), pct, inputs,
                       int(n - finite.size))
