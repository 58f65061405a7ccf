"""Relation kinds: every kind of the YAML syntax has one home under gpustack_compiler/kinds (and no home
lacks a kind), and a stochastic relation is drawn under Monte Carlo but sits at its mean otherwise."""

from __future__ import annotations

import typing
from pathlib import Path

import numpy as np
import pytest
from helpers import Engine, mini_catalog, write_system

from gpustack_compiler.base.errors import ResolveError
from gpustack_compiler.language import models
from gpustack_compiler.language.kinds import KINDS
from gpustack_compiler.language.kinds.distributions import DISTRIBUTIONS
from gpustack_sim.analyses.estimate import intervals
from gpustack_sim.analyses.uncertainty import MonteCarlo, parse_spec

HOMES = Path(__file__).resolve().parent.parent / "gpustack_compiler" / "language" / "kinds"
SHARED = {"__init__", "base", "evaluation", "distributions"}  # the registry and what the kinds share


def test_every_kind_in_the_syntax_has_one_home_and_every_home_a_kind() -> None:
    print("relation kinds:", ", ".join(f"{name} ({type(k).__module__})" for name, k in KINDS.items()))
    assert list(KINDS) == list(models.RELATION_KINDS)
    for name, kind in KINDS.items():
        assert kind.name == name and type(kind).__module__ == f"gpustack_compiler.language.kinds.{name}"
    assert {p.stem for p in HOMES.glob("*.py")} - SHARED == set(KINDS)


def test_the_syntax_names_the_distributions_defined_once() -> None:
    declared = typing.get_args(models.Stochastic.model_fields["distribution"].annotation)
    assert set(declared) == set(DISTRIBUTIONS)


# Two stochastic relations on a root x, and a sum of them: u ~ uniform(x, 3x), n ~ normal(x, x/4).
STOCHASTIC = """variables:
  - {name: econ.x, units: s, description: input, references: [narayanan2021_megatron], root: {category: scenario_boundary, family: t}}
  - {name: econ.u, units: s, description: uniform draw, references: [narayanan2021_megatron]}
  - {name: econ.n, units: s, description: normal draw, references: [narayanan2021_megatron]}
  - {name: econ.sum, units: s, description: their sum, references: [narayanan2021_megatron]}
relations:
  - name: econ.u.rule
    kind: stochastic
    defines: econ.u
    distribution: uniform
    parameters: {low: "econ.x", high: "3 * econ.x"}
    description: uniform between x and 3x
    references: [narayanan2021_megatron]
  - name: econ.n.rule
    kind: stochastic
    defines: econ.n
    distribution: normal
    parameters: {mean: "econ.x", sd: "0.25 * econ.x"}
    description: normal around x
    references: [narayanan2021_megatron]
  - name: econ.sum.rule
    kind: identity
    defines: econ.sum
    expression: "econ.u + econ.n"
    description: sum
    references: [narayanan2021_megatron]
"""
N = 40000


@pytest.fixture(scope="module")
def engine(tmp_path_factory) -> Engine:
    root = mini_catalog(tmp_path_factory.mktemp("stochastic"))
    write_system(root, "economics", STOCHASTIC)
    return Engine(root)


def sample(engine: Engine, target: str, dists=(), seed: int = 1):
    scenario = engine.scenarios.build(assign={"econ.x": "2 s"})
    return MonteCarlo(engine.resolver).run(target, scenario, list(dists), N, seed)


def test_plain_resolution_takes_the_mean(engine: Engine) -> None:
    res = engine.resolve("econ.sum", assign=["econ.x=2 s"])
    assert res.value == pytest.approx(4.0 + 2.0)
    step = next(s for s in res.trace if s.variable == "econ.u")
    assert step.kind == "stochastic" and step.note == "mean of its uniform distribution"


def test_monte_carlo_draws_the_declared_distribution(engine: Engine) -> None:
    u = sample(engine, "econ.u")
    assert u.mean == pytest.approx(4.0, rel=1e-2) and u.sd == pytest.approx(4 / 12 ** 0.5, rel=2e-2)
    assert (u.percentiles[5], u.percentiles[95]) == (pytest.approx(2.2, rel=1e-2), pytest.approx(5.8, rel=1e-2))
    assert u.inputs == {"econ.u": "uniform(2, 6) by econ.u.rule"}
    n = sample(engine, "econ.n")
    assert n.mean == pytest.approx(2.0, rel=1e-2) and n.sd == pytest.approx(0.5, rel=2e-2)
    # independent draws of the two relations propagate through the identity
    both = sample(engine, "econ.sum")
    assert both.mean == pytest.approx(6.0, rel=1e-2)
    assert both.sd == pytest.approx((16 / 12 + 0.25) ** 0.5, rel=2e-2)


def test_parameters_follow_sampled_roots(engine: Engine) -> None:
    # x ~ uniform(1 s, 3 s), then u ~ uniform(x, 3x): E[u] = 2 E[x] = 4 s, and u spans 1 s .. 9 s.
    x = parse_spec("econ.x~uniform(low=1 s, high=3 s)", engine.scenarios)
    u = sample(engine, "econ.u", [x])
    assert u.mean == pytest.approx(4.0, rel=1e-2)
    assert 1.0 < u.percentiles[5] < 2.0 and 6.0 < u.percentiles[95] < 9.0
    assert "parameters depending on sampled inputs" in u.inputs["econ.u"]


def test_seeded_and_the_same_draws_wherever_they_are_asked_for(engine: Engine) -> None:
    assert sample(engine, "econ.u", seed=3) == sample(engine, "econ.u", seed=3)
    assert sample(engine, "econ.u", seed=3).percentiles != sample(engine, "econ.u", seed=4).percentiles
    # The estimate's intervals draw u alike whether or not n is drawn beside it.
    scenario = engine.scenarios.build(assign={"econ.x": "2 s"})
    bands = intervals(engine.resolver, scenario, ["econ.sum", "econ.u"], [], N, 3)
    alone = sample(engine, "econ.u", seed=3)
    assert bands["econ.u"] == pytest.approx(alone.percentiles, rel=1e-12)
    assert bands["econ.sum"][50] == pytest.approx(6.0, rel=2e-2)


def test_exponential_rate_is_per_unit_of_the_variable(engine: Engine) -> None:
    dist = parse_spec("econ.x~exponential(rate=2 1/s)", engine.scenarios)
    draws = dist.draw(np.random.Generator(np.random.PCG64(0)), N)
    assert dist.parameters == {"rate": 2.0} and draws.mean() == pytest.approx(0.5, rel=2e-2)
    assert dist.describe(1e-3) == "exponential(rate 0.002)"  # shown per millisecond


ONE_DRAW = """variables:
  - {name: econ.x, units: s, description: input, references: [narayanan2021_megatron], root: {category: scenario_boundary, family: t}}
  - {name: econ.r, units: s, description: drawn, references: [narayanan2021_megatron]}
relations:
  - name: econ.r.rule
    kind: stochastic
    defines: econ.r
    distribution: DISTRIBUTION
    parameters: PARAMETERS
    description: a draw
    references: [narayanan2021_megatron]
"""


@pytest.mark.parametrize("distribution,parameters,finding", [
    ("normal", '{mu: "econ.x", sd: "econ.x"}', "schema.invalid"),  # the catalog's names, no other spelling
    ("exponential", '{rate: "econ.x"}', "dim.mismatch"),  # a rate is per unit of the variable
    ("exponential", '{rate: "1 / econ.x"}', None),
    ("lognormal", '{median: "econ.x", sigma: "econ.x"}', "dim.mismatch"),  # sigma is dimensionless
])
def test_stochastic_parameters_are_checked(tmp_path: Path, distribution: str, parameters: str, finding) -> None:
    from helpers import check

    root = mini_catalog(tmp_path)
    write_system(root, "economics", ONE_DRAW.replace("DISTRIBUTION", distribution).replace("PARAMETERS", parameters))
    assert [f.id for f in check(root).errors] == ([finding] if finding else [])


UNDEFINED = """variables:
  - {name: econ.a, units: s, description: input, references: [narayanan2021_megatron], root: {category: scenario_boundary, family: t}}
  - {name: econ.b, units: s, description: input, references: [narayanan2021_megatron], root: {category: scenario_boundary, family: t}}
  - {name: econ.q, units: "1", description: a bounded ratio, references: [narayanan2021_megatron]}
relations:
  - name: econ.q.ratio
    kind: identity
    defines: econ.q
    expression: Max(econ.a / econ.b, 1)
    description: the ratio, at least 1
    references: [narayanan2021_megatron]
"""


def test_an_undefined_number_is_a_resolve_error_naming_the_relation(tmp_path: Path) -> None:
    root = mini_catalog(tmp_path)
    write_system(root, "economics", UNDEFINED)
    engine = Engine(root)
    assert engine.value("econ.q", assign=["econ.a=6 s", "econ.b=2 s"]) == 3
    with pytest.raises(ResolveError, match=r"econ\.q\.ratio cannot be evaluated at these inputs: an undefined number"):
        engine.resolve("econ.q", assign=["econ.a=0 s", "econ.b=0 s"])
