"""The distributions a stochastic relation or a `--sample` option may name, each defined once: its
parameter names (in positional order), each parameter's dimension, its mean, and its numpy draw.

A draw is a transform of standard noise (`noise`, which needs no parameters): Monte Carlo draws the
noise of every random variable up front and applies the parameters later, once they are known as
arrays. For the parameters numpy's own samplers take, the transform reproduces them bit for bit.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import sympy

from .evaluation import Value

if TYPE_CHECKING:
    import numpy as np


def _exp(x):
    return math.exp(x) if isinstance(x, float) else sympy.exp(x)


def _holds(*conditions) -> bool:
    """Every condition holds, whether each is a bool or an array of them."""
    return all(bool(c.all()) if hasattr(c, "all") else bool(c) for c in conditions)


def _phi(z: float) -> float:
    """The standard normal distribution function; a point mass (z = +-inf) steps at its value."""
    return 0.5 * (1.0 + math.erf(z / math.sqrt(2.0)))


def _standardised(x: float, centre: float, spread: float) -> float:
    if spread > 0:
        return (x - centre) / spread
    return math.inf if x >= centre else -math.inf


def _lognormal(p: dict, z: np.ndarray) -> np.ndarray:
    import numpy as np  # only Monte Carlo needs numpy; checking a catalog does not

    return p["median"] * np.exp(p["sigma"] * z)


@dataclass(frozen=True)
class Family:
    name: str
    parameters: dict[str, int]  # name -> power of the variable's dimension it has (0: dimensionless)
    shown: str  # format of a drawn quantity's description, parameters in the variable's declared unit
    mean: Callable[[dict], Value]
    noise: Callable[[np.random.Generator, int], np.ndarray]
    transform: Callable[[dict, np.ndarray], np.ndarray]
    domain: Callable[[dict], bool]  # whether parameter values (floats or arrays) are allowed
    domain_text: str
    cdf: Callable[[dict, float], float]  # P(X <= x) at float parameters

    @property
    def signature(self) -> str:
        return f"{self.name}({', '.join(self.parameters)})"

    def draw(self, rng: np.random.Generator, parameters: dict, n: int) -> np.ndarray:
        return self.transform(parameters, self.noise(rng, n))

    def describe(self, parameters: dict[str, float], scale: float) -> str:
        return self.shown.format(**{k: parameters[k] / scale ** p for k, p in self.parameters.items()})


NORMAL = Family(
    "normal", {"mean": 1, "sd": 1}, "normal({mean:g}, {sd:g})",
    mean=lambda p: p["mean"],
    noise=lambda rng, n: rng.standard_normal(n),
    transform=lambda p, z: p["mean"] + p["sd"] * z,
    domain=lambda p: _holds(p["sd"] >= 0), domain_text="sd >= 0",
    cdf=lambda p, x: _phi(_standardised(x, p["mean"], p["sd"])))
LOGNORMAL = Family(
    "lognormal", {"median": 1, "sigma": 0}, "lognormal(median {median:g}, sigma {sigma:g})",
    mean=lambda p: p["median"] * _exp(p["sigma"] ** 2 / 2),
    noise=lambda rng, n: rng.standard_normal(n),
    transform=_lognormal,
    domain=lambda p: _holds(p["median"] > 0, p["sigma"] >= 0), domain_text="median > 0 and sigma >= 0",
    cdf=lambda p, x: _phi(_standardised(math.log(x), math.log(p["median"]), p["sigma"])) if x > 0 else 0.0)
UNIFORM = Family(
    "uniform", {"low": 1, "high": 1}, "uniform({low:g}, {high:g})",
    mean=lambda p: (p["low"] + p["high"]) / 2,
    noise=lambda rng, n: rng.random(n),
    transform=lambda p, u: p["low"] + (p["high"] - p["low"]) * u,
    domain=lambda p: _holds(p["low"] <= p["high"]), domain_text="low <= high",
    cdf=lambda p, x: (min(1.0, max(0.0, (x - p["low"]) / (p["high"] - p["low"]))) if p["high"] > p["low"]
                      else float(x >= p["low"])))
EXPONENTIAL = Family(
    "exponential", {"rate": -1}, "exponential(rate {rate:g})",
    mean=lambda p: 1 / p["rate"],
    noise=lambda rng, n: rng.standard_exponential(n),
    transform=lambda p, e: (1 / p["rate"]) * e,
    domain=lambda p: _holds(p["rate"] > 0), domain_text="rate > 0",
    cdf=lambda p, x: -math.expm1(-p["rate"] * x) if x > 0 else 0.0)

DISTRIBUTIONS: dict[str, Family] = {f.name: f for f in (NORMAL, LOGNORMAL, UNIFORM, EXPONENTIAL)}


@dataclass
class RandomValue:
    """A variable a stochastic relation draws; parameters in base units, floats or (under Monte Carlo)
    sympy expressions in the sampled inputs."""

    relation: str
    family: Family
    parameters: dict[str, Value]

    @property
    def free_symbols(self) -> set:
        """What the draw depends on, as for a sympy expression: the symbols in its parameters."""
        return set().union(*(p.free_symbols for p in self.parameters.values() if not isinstance(p, float)))

    def describe(self, scale: float) -> str:
        if all(isinstance(v, float) for v in self.parameters.values()):
            return f"{self.family.describe(self.parameters, scale)} by {self.relation}"
        return f"{self.family.signature} by {self.relation}, parameters depending on sampled inputs"
