"""Uncertainty by vectorized Monte Carlo: sampled roots are left symbolic, the resolved expression is
compiled once with sympy's lambdify and evaluated with numpy on seeded samples. Stochastic relations in
the cone are drawn from their distributions too (their deterministic value is only their mean).

Sampled roots are written `NAME~normal(mean, sd)`, `NAME~lognormal(median, sigma)` (sigma of the
logarithm), `NAME~uniform(low, high)` or `NAME~exponential(rate)`: the distributions and parameter names
of the catalog's stochastic relations. Parameters go by position or by name and may carry units
(`normal(0.5 kW, 50 W)`, `normal(mean=0.5 kW, sd=50 W)`). The text is read with a regular expression
and the quantity parser, never evaluated. Draws are truncated to the variable's declared assumptions and
bounds (a distribution mostly outside them is refused), and a variable with a definition is sampled only
when the text ends with `instead of its definition`.
"""

from __future__ import annotations

import functools
import inspect
import math
import pickle
import re
from collections.abc import Sequence
from dataclasses import dataclass

import cloudpickle
import numpy as np
import sympy
from sympy.core.parameters import evaluate
from sympy.logic.boolalg import ITE, BooleanFunction

from gpustack_compiler.base.errors import InputError
from gpustack_compiler.base.limits import MAX_SAMPLES, refuse_over
from gpustack_compiler.language.kinds import CONSTRAINT, kind_of
from gpustack_compiler.language.kinds.distributions import DISTRIBUTIONS, Family, RandomValue

from ..distributed import Backend, chunk_ranges, chunk_seed
from ..engine.resolver import Resolution, ResolveError, Resolver
from ..engine.scenario import Scenario, ScenarioBuilder

SPEC = re.compile(r"^\s*([a-z][a-z0-9_.]*)\s*~\s*([a-z]+)\s*\((.*)\)\s*(instead of its definition)?\s*$")
# What a `--sample` on a variable with a definition must say to replace that definition.
REPLACES = "instead of its definition"
# The least share of a `--sample` distribution that must fall inside its variable's declared assumptions and
# bounds: the draws are that distribution truncated to them, and one that is mostly cut away is not what was
# written.
MIN_MASS_INSIDE = 0.5
PERCENTILES = (5, 50, 95)
# Samples per chunk of a Monte Carlo run. Each chunk draws from a seed of its own, so the samples do not
# depend on how many workers draw them; a run of at most this many draws as one stream.
SAMPLE_CHUNK = 100_000


@dataclass(frozen=True)
class Domain:
    """Where a variable's values may lie (base units), from its declared assumptions and bounds."""

    low: float = -math.inf
    high: float = math.inf
    low_open: bool = False
    high_open: bool = False

    @classmethod
    def of(cls, var) -> Domain:
        low, high, low_open, high_open = -math.inf, math.inf, False, False
        for a in var.assumptions:
            if a in ("positive", "nonnegative") and low <= 0:
                low, low_open = 0.0, a == "positive"
            elif a in ("negative", "nonpositive") and high >= 0:
                high, high_open = 0.0, a == "negative"
        if var.bounds is not None:
            if var.bounds.min is not None and var.bounds.min * var.scale >= low:
                low, low_open = var.bounds.min * var.scale, False
            if var.bounds.max is not None and var.bounds.max * var.scale <= high:
                high, high_open = var.bounds.max * var.scale, False
        return cls(low, high, low_open, high_open)

    def inside(self, x: np.ndarray) -> np.ndarray:
        return ((x > self.low) if self.low_open else (x >= self.low)) & \
            ((x < self.high) if self.high_open else (x <= self.high))

    def mass(self, family: Family, parameters: dict[str, float]) -> float:
        """The probability the distribution gives the domain."""
        below = family.cdf(parameters, self.low if self.low_open else math.nextafter(self.low, -math.inf))
        upto = family.cdf(parameters, math.nextafter(self.high, -math.inf) if self.high_open else self.high)
        return max(0.0, upto - below)

    def describe(self, scale: float) -> str:
        return (f"{'(' if self.low_open or self.low == -math.inf else '['}{self.low / scale:g}, "
                f"{self.high / scale:g}{')' if self.high_open or self.high == math.inf else ']'}")


@dataclass(frozen=True)
class Distribution:
    """A sampled root: its distribution with parameters in base units, truncated to `domain` when given
    (draws outside it are drawn again, from the same stream, until none is left)."""

    name: str
    family: Family
    parameters: dict[str, float]
    domain: Domain | None = None
    replaces: bool = False  # the text said it replaces the variable's definition

    def draw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        x = self.family.draw(rng, self.parameters, n)
        if self.domain is None:
            return x
        outside = ~self.domain.inside(x)
        while outside.any():  # at least MIN_MASS_INSIDE of each draw lands inside: a few dozen rounds at most
            x[outside] = self.family.draw(rng, self.parameters, int(outside.sum()))
            outside &= ~self.domain.inside(x)
        return x

    def describe(self, scale: float) -> str:
        shown = self.family.describe(self.parameters, scale)
        return shown if self.domain is None else f"{shown} truncated to {self.domain.describe(scale)}"


def parse_spec(text: str, scenarios: ScenarioBuilder) -> Distribution:
    match = SPEC.match(text)
    family = DISTRIBUTIONS.get(match.group(2)) if match else None
    if family is None:
        raise InputError(f"--sample {text!r}: expected " + " or ".join(f"NAME~{f.signature}"
                                                                        for f in DISTRIBUTIONS.values()))
    name, _, args, replaces = match.groups()
    given = _arguments(text, family, args)
    parameters = {key: scenarios.quantity(name, given[key], "--sample", power).value
                  for key, power in family.parameters.items()}
    if not family.domain(parameters):
        raise InputError(f"--sample {text!r}: {family.name} needs {family.domain_text}")
    var = scenarios.variable(name, "--sample")
    domain = Domain.of(var)
    mass = domain.mass(family, parameters)
    if mass < MIN_MASS_INSIDE:
        declared = " and ".join(filter(None, [", ".join(var.assumptions), "bounds" if var.bounds else ""]))
        raise InputError(f"--sample {text!r}: only {mass:.3g} of {family.describe(parameters, var.scale)} lies "
                         f"within `{name}`'s declared {declared} {domain.describe(var.scale)}, under the "
                         f"{MIN_MASS_INSIDE:g} a truncated draw needs",
                         "choose a distribution mostly inside the variable's domain")
    return Distribution(name, family, parameters, domain if mass < 1.0 else None, bool(replaces))


def held(resolver: Resolver, scenario: Scenario, dists: Sequence[Distribution]) -> Scenario:
    """The scenario with the sampled roots held symbolic. A distribution on a variable the scenario would
    compute by a definition (not assign) would replace that definition: refused unless its text says so."""
    names = [d.name for d in dists]
    computed = [d.name for d in dists if d.name not in scenario.assignments and not d.replaces]
    definitions: dict[str, list[str]] = {}
    for rel in resolver.source.relations_defining(computed) if computed else []:
        if rel.get("defines") in computed and kind_of(rel).role != CONSTRAINT:
            definitions.setdefault(rel["defines"], []).append(rel["name"])
    if definitions:
        name, rels = min(definitions.items())
        raise InputError(f"--sample {name}~...: `{name}` is computed by {', '.join(sorted(rels))} in this scenario; "
                         "sampling it would replace that definition",
                         f"add '{REPLACES}' after the distribution to mean it, or sample one of its inputs")
    return scenario.holding(names)


def _arguments(text: str, family: Family, args: str) -> dict[str, str]:
    """Parameter name -> its text, from arguments given by position or as `name=value`."""
    names = list(family.parameters)
    pairs = []
    for i, arg in enumerate(a.strip() for a in args.split(",")):
        key, named, value = arg.partition("=")
        pairs.append((key.strip(), value.strip()) if named else (names[i] if i < len(names) else None, arg))
    given = dict(pairs)
    if len(pairs) != len(names) or set(given) != set(names) or not all(given.values()):
        raise InputError(f"--sample {text!r}: {family.name} takes {len(names)} parameter(s): {family.signature}",
                         "by position or by name, e.g. normal(0.5 kW, 50 W) or normal(mean=0.5 kW, sd=50 W)")
    return given


_VMIN, _VMAX = sympy.Function("vmin"), sympy.Function("vmax")


class _Elementwise(BooleanFunction):
    """And/Or for numpy that keep a scalar beside an array (lambdify's stack them) and stay a Boolean, so a
    Piecewise condition or a Not can hold one; printed by name, the function is `_ELEMENTWISE`'s."""

    def _numpycode(self, printer) -> str:
        return f"{type(self).__name__}({', '.join(printer._print(a) for a in self.args)})"


# Printed as vand/vor; pickled by their names in this module.
_VAND = type("vand", (_Elementwise,), {"__qualname__": "_VAND"})
_VOR = type("vor", (_Elementwise,), {"__qualname__": "_VOR"})
_ELEMENTWISE = {"vmin": lambda *a: functools.reduce(np.minimum, a), "vmax": lambda *a: functools.reduce(np.maximum, a),
                "vand": lambda *a: functools.reduce(np.logical_and, a),
                "vor": lambda *a: functools.reduce(np.logical_or, a)}


def vectorize(symbols: list, expr: sympy.Basic):
    """Compile `expr` to a numpy function of `symbols`, elementwise throughout: lambdify's Min/Max (and
    And/Or) stack their arguments, which fails when one is a scalar and another an array."""
    args = [sympy.Symbol(f"x{i}") for i in range(len(symbols))]
    rebuilt = _for_numpy(expr, dict(zip(symbols, args)), {})
    # The numpy module itself, not "numpy": lambdify then runs `from numpy import *`, which with numpy 2
    # imports every numpy submodule (f2py, testing, ...). No docstring: its text would cost a third of
    # the compile.
    return sympy.lambdify(args, rebuilt, modules=[_ELEMENTWISE, np], docstring_limit=0)


# Symbolic values larger than this many nodes are cut into stages when a resolution is compiled for numpy.
STAGE_LIMIT = 200


def vectorize_resolution(symbols: list, res: Resolution | Symbolic, zero: tuple[str, ...] = (),
                         compiled: dict | None = None, noise: dict[str, np.ndarray] | None = None,
                         sources: dict | None = None, key: str | None = None):
    """A numpy function of `symbols` for a symbolic resolution. A staged one is compiled stage by stage
    (once per `compiled` cache, which several targets of one run may share) and evaluated in dependency
    order, then the target from the stages. A drawn stage (a stochastic relation under Monte Carlo) turns
    its standard `noise` (given here, or to each call) into draws with its parameters as evaluated. Names in
    `zero` read as 0. With `sources` (stage names, and `key` for the target -> `stage_source`), what lambdify
    printed before is compiled again instead of printed again, and what it prints now is added."""
    compiled = {} if compiled is None else compiled
    steps = []
    for name, stage in res.stages.items():
        if name not in compiled:
            compiled[name] = compile_stage(stage, sources, name)
        steps.append((name, stage, compiled[name]))
    target = compile_stage(res.symbolic, sources, key)

    def fn(*arrays, noise=noise):
        env = {s.name: a for s, a in zip(symbols, arrays)}
        env.update({n: 0.0 for n in zero})
        for name, stage, f in steps:
            env[name] = _draw(stage, f(env), noise[name]) if isinstance(stage, RandomValue) else f(env)
        return target(env)
    return fn


def compile_stage(stage, sources: dict | None = None, key: str | None = None):
    """A function of the values so far (name -> array): of a symbolic value, or of a draw's parameters.
    With `sources` and a `key`, from the source printed for that key before (printing it now if not)."""
    if isinstance(stage, RandomValue):
        parameters = {k: compile_stage(v, sources, key and f"{key}~{k}") for k, v in stage.parameters.items()}
        return lambda env: {k: f(env) for k, f in parameters.items()}
    if isinstance(stage, float):
        return lambda env: stage
    if sources is not None and key is not None:
        if key not in sources:
            sources[key] = stage_source(stage)
        return from_source(*sources[key])
    args = sorted(stage.free_symbols, key=lambda s: s.name)
    names, f = [a.name for a in args], vectorize(args, stage)
    return lambda env: f(*(env[n] for n in names))


def stage_source(stage: sympy.Basic) -> tuple[list[str], str]:
    """The names a symbolic value reads and the Python source of its numpy function (`compile_stage`'s,
    as lambdify prints it). Printing is most of compiling: a model kept as sources compiles again in
    milliseconds (analyses/sweep.py keeps them in the build cache, beside the parsed relations)."""
    args = sorted(stage.free_symbols, key=lambda s: s.name)
    return [a.name for a in args], inspect.getsource(vectorize(args, stage))


def from_source(names: list[str], source: str):
    """A function of the values so far, from `stage_source`: the source compiled in the namespace
    lambdify gives it (numpy, and the elementwise Min/Max/And/Or)."""
    space = {**vars(np), **_ELEMENTWISE}
    exec(compile(source, "<numeric model>", "exec"), space)  # noqa: S102 - source printed by lambdify, above
    f = space["_lambdifygenerated"]
    return lambda env: f(*(env[n] for n in names))


def _draw(stage: RandomValue, parameters: dict, noise: np.ndarray) -> np.ndarray:
    family = stage.family
    if not family.domain(parameters):
        raise InputError(f"{stage.relation}: {family.name} needs {family.domain_text}, and some samples of its "
                         "parameters are outside that")
    return family.transform(parameters, noise)


def draw_inputs(dists: list[Distribution], resolutions: Sequence[Resolution | Symbolic], seed: int,
                n: int, chunk: int = 0) -> tuple[list[np.ndarray], dict[str, np.ndarray]]:
    """Draws of the sampled roots (one seeded stream, in the order given), and the standard noise of every
    stochastic relation the resolutions draw. Each of those has a stream of its own, seeded by the seed and
    its name, so its draws do not depend on what else is sampled: `resolve --sample` on one figure and the
    estimate's intervals draw it alike. Chunk k of a run draws from the k-th chunk seed of each stream. The
    same seed gives the same bytes."""
    rng = np.random.Generator(np.random.PCG64(chunk_seed(seed, chunk)))
    draws = [d.draw(rng, n) for d in dists]
    drawn = {k: v for res in resolutions for k, v in res.stages.items() if isinstance(v, RandomValue)}
    return draws, {k: v.family.noise(np.random.Generator(np.random.PCG64(chunk_seed([seed, *k.encode()], chunk))), n)
                   for k, v in sorted(drawn.items())}


@dataclass(frozen=True)
class Symbolic:
    """What evaluating a symbolic resolution needs (its trace stays behind when it is sent to a worker)."""

    symbolic: sympy.Basic
    stages: dict

    def __reduce__(self):
        # Unpickling rebuilds a sympy tree evaluated (a number distributed over a sum, Min(1.2, 1, x) folded to
        # Min(1, x), ...), which reorders its floating-point operations: the value travels as bytes and is
        # rebuilt unevaluated, so a worker computes bit for bit what this process does.
        return _arrive, (cloudpickle.dumps((self.symbolic, self.stages)),)


def _arrive(data: bytes) -> Symbolic:
    with evaluate(False):
        return Symbolic(*pickle.loads(data))


class Sampler:
    """Chunks of a Monte Carlo run: the sampled roots and the symbolic targets, drawn and evaluated chunk by
    chunk, here or on a Dask worker (each process compiles the targets once)."""

    def __init__(self, symbols: list, dists: list[Distribution], targets: dict[str, Resolution], seed: int,
                 sources: dict | None = None):
        """`sources`: the compiled targets' sources kept from an earlier run (vectorize_resolution), filled
        as this one compiles."""
        self.symbols, self.dists, self.seed = symbols, dists, seed
        self.targets = {t: Symbolic(r.symbolic, r.stages) for t, r in targets.items()}
        self.sources = sources
        self._fns: dict | None = None

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_fns": None}  # each process compiles its own

    def chunk(self, index: int, n: int) -> dict[str, np.ndarray]:
        if self._fns is None:
            compiled: dict = {}
            self._fns = {t: vectorize_resolution(self.symbols, p, compiled=compiled, sources=self.sources, key=f"={t}")
                         for t, p in self.targets.items()}
        draws, noise = draw_inputs(self.dists, list(self.targets.values()), self.seed, n, index)
        return {t: np.broadcast_to(np.asarray(f(*draws, noise=noise), dtype=float), (n,))
                for t, f in self._fns.items()}

    def run(self, n: int, backend: Backend | None = None, progress=None) -> dict[str, np.ndarray]:
        """Every target's `n` values in base units, in sample order whatever the backend."""
        refuse_over(n, MAX_SAMPLES, "--samples", "every target keeps all its samples for exact percentiles")
        chunks = [(k, stop - start) for k, (start, stop) in enumerate(chunk_ranges(n, SAMPLE_CHUNK))]
        parts = (backend or Backend()).map(_sample_chunk, self, chunks, progress)
        return {t: np.concatenate([p[t] for p in parts]) for t in self.targets}


def _sample_chunk(sampler: Sampler, chunk: tuple[int, int]) -> dict[str, np.ndarray]:
    return sampler.chunk(*chunk)


def _ite_as_and_or(cond, then, other, evaluate: bool = False) -> sympy.Basic:
    """ITE(c, a, b) as (c & a) | (~c & b). A Piecewise compared with a number becomes an ITE in a condition,
    and lambdify's numpy printer runs simplify_logic on every condition holding one (40 s for one serving
    model); the same logic written with And/Or/Not prints as it is."""
    return _VOR(_VAND(cond, then), _VAND(sympy.Not(cond, evaluate=evaluate), other))


# Node types rebuilt as another for numpy: Min/Max/And/Or elementwise, ITE without logic simplification.
_FOR_NUMPY = {sympy.Min: _VMIN, sympy.Max: _VMAX, sympy.And: _VAND, sympy.Or: _VOR, ITE: _ite_as_and_or}


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
    func = _FOR_NUMPY.get(expr.func, expr.func)
    try:
        out = func(*args, evaluate=False)
    except TypeError:  # a few node types (ExprCondPair) take no evaluate flag
        out = func(*args)
    seen[expr] = out
    return out


def percentiles(values: np.ndarray, at: Sequence[int] = PERCENTILES) -> dict[int, float]:
    return {p: float(v) for p, v in zip(at, np.percentile(values, at))}


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

    def __init__(self, resolver: Resolver, backend: Backend | None = None):
        self.resolver = resolver
        self.backend = backend

    def run(self, target: str, scenario: Scenario, dists: list[Distribution], n: int, seed: int) -> Summary:
        if n < 2:
            raise InputError("--samples must be at least 2")
        names = [d.name for d in dists]
        if len(set(names)) != len(names):
            raise InputError("each variable may be sampled once")
        if self.resolver.variable(target) is None:
            raise InputError(f"unknown variable `{target}`")
        res = self.resolver.resolve_many([target], held(self.resolver, scenario, dists), stage_limit=STAGE_LIMIT,
                                         monte_carlo=True)[target]
        if isinstance(res, ResolveError):
            raise res
        others = sorted(res.missing)
        if others:
            raise InputError(f"{target} still depends on unassigned roots: {', '.join(others)}",
                             "assign them or sample them too")
        meta = self.resolver.variable(target)
        if res.value is not None:
            values = np.full(n, res.value * meta.scale)
        else:
            sampler = Sampler([self.resolver.symbol(x) for x in names], dists, {target: res}, seed)
            values = sampler.run(n, self.backend)[target]
        shown = values / meta.scale
        finite = shown[np.isfinite(shown)]
        if finite.size == 0:
            raise InputError(f"no finite value of {target} in {n} samples")
        pct = percentiles(finite)
        var = self.resolver.variable
        inputs = {d.name: d.describe(var(d.name).scale) for d in dists}
        inputs.update({name: v.describe(var(name).scale) for name, v in res.random.items()})
        return Summary(target, meta.units, n, seed, float(finite.mean()), float(finite.std(ddof=1)), pct, inputs,
                       int(n - finite.size))
