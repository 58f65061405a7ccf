"""Monte Carlo over sampled roots: seeded, deterministic, and right where the answer is known."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import sympy
from helpers import CATALOG, FIXTURE, Engine, run_cli
from sympy.logic.boolalg import ITE

from gpustack_compiler.base.errors import InputError
from gpustack_sim.analyses.uncertainty import MonteCarlo, _for_numpy, parse_spec, vectorize


def test_linear_dependency_has_the_analytic_mean(real_engine: Engine) -> None:
    scenario = real_engine.scenarios.build([FIXTURE])
    dist = parse_spec("econ.job.capex_rate~uniform(10 USD/s, 30 USD/s)", real_engine.scenarios)
    summary = MonteCarlo(real_engine.resolver).run("econ.cost.per_token", scenario, [dist], 20000, seed=7)
    # cost per token = (capex_rate * 1.5 s + 0.00078 USD) / 1e7 token, linear in the sampled rate
    assert summary.mean == pytest.approx((20 * 1.5 + 0.00078) / 1e7, rel=5e-3)
    assert summary.percentiles[5] == pytest.approx((11 * 1.5 + 0.00078) / 1e7, rel=1e-2)
    assert summary.percentiles[95] == pytest.approx((29 * 1.5 + 0.00078) / 1e7, rel=1e-2)
    assert summary.nonfinite == 0


def test_units_in_parameters_and_lognormal(real_engine: Engine) -> None:
    dist = parse_spec("gpu.power.total~normal(0.5 kW, 50 W)", real_engine.scenarios)
    assert dist.parameters == {"mean": 500.0, "sd": 50.0}
    assert parse_spec("gpu.power.total~normal(sd=50 W, mean=0.5 kW)", real_engine.scenarios) == dist
    logn = parse_spec("econ.power.price_kwh_peak~lognormal(0.36 USD/kWh, 0.2)", real_engine.scenarios)
    draws = logn.draw(np.random.Generator(np.random.PCG64(1)), 50000)
    assert np.median(draws) == pytest.approx(0.36 / 3.6e6, rel=1e-2)


@pytest.mark.parametrize("bad", ["gpu.power.total~gamma(1, 2)", "gpu.power.total~normal(1 W)",
                                 "gpu.power.total~normal(1 s, 2 s)", "gpu.power.total~uniform(5 W, 1 W)",
                                 "nope.x~normal(1, 2)", "gpu.power.total~normal(mu=1 W, sd=2 W)",
                                 "gpu.power.total~normal(1 W, mean=2 W)", "gpu.power.total~exponential(2 W)",
                                 "gpu.power.total~lognormal(1 W, 2 W)"])
def test_bad_specs(real_engine: Engine, bad: str) -> None:
    with pytest.raises(InputError):
        parse_spec(bad, real_engine.scenarios)


def test_unassigned_roots_are_refused(real_engine: Engine) -> None:
    dist = parse_spec("gpu.power.total~normal(500 W, 50 W)", real_engine.scenarios)
    scenario = real_engine.scenarios.build([FIXTURE])
    del scenario.assignments["econ.power.price_kwh_peak"]
    with pytest.raises(InputError, match="still depends on unassigned roots: econ.power.price_kwh_peak"):
        MonteCarlo(real_engine.resolver).run("econ.cost.per_token", scenario, [dist], 100, 0)


def test_same_seed_same_bytes(gpustack_cli, real_build: Path) -> None:
    args = ["--catalog", str(CATALOG), "--build-dir", str(real_build), "resolve", "econ.cost.per_token",
            "--preset", FIXTURE, "--sample", "gpu.power.total~normal(0.5 kW, 50 W)",
            "--sample", "training.compute_efficiency~uniform(0.4, 0.6)", "--samples", "5000", "--json"]
    # the second run in a process of its own: the same bytes must not depend on the process
    first, second = gpustack_cli(*args, "--seed", "3"), run_cli(*args, "--seed", "3")
    assert first.returncode == 0, first.stderr
    assert first.stdout == second.stdout
    other = json.loads(gpustack_cli(*args, "--seed", "4").stdout)["uncertainty"]
    assert other["p50"] != json.loads(first.stdout)["uncertainty"]["p50"]


def test_monte_carlo_on_a_run_with_modes_matches_the_estimate(real_engine: Engine) -> None:
    # A run's scenario selects definitions by mode (dense, gqa, ...): sampling must keep them.
    from gpustack_sim.analyses.estimate import fitted_distributions
    from gpustack_sim.engine.run_file import load_run

    run = load_run(Path(__file__).resolve().parent.parent / "runs" / "llama70b_1024xh100.yaml")
    scenario = real_engine.run_scenario(run)
    dists = fitted_distributions(scenario)
    assert dists and scenario.modes
    summary = MonteCarlo(real_engine.resolver).run("econ.cost.per_token", scenario, dists, 3000, seed=3)
    est = real_engine.estimate(run, 3000, 3)
    band = next(f for f in est.figures if f.target == "econ.cost.per_token").interval
    assert band is not None and summary.nonfinite == 0
    for p in (5, 50, 95):  # the same draws of the same inputs through the same expression
        assert summary.percentiles[p] == pytest.approx(band[p], rel=1e-9)


def test_staged_compilation_matches_one_expression(real_engine: Engine) -> None:
    # Cutting large symbolic values into stages changes how the function is built, not what it computes.
    from gpustack_sim.analyses.estimate import fitted_distributions
    from gpustack_sim.analyses.uncertainty import vectorize_resolution
    from gpustack_sim.engine.run_file import load_run

    run = load_run(Path(__file__).resolve().parent.parent / "runs" / "llama70b_1024xh100.yaml")
    scenario = real_engine.run_scenario(run)
    names = [d.name for d in fitted_distributions(scenario)]
    held = scenario.holding(names)
    symbols = [real_engine.resolver.symbol(n) for n in names]
    draws = [d.draw(np.random.Generator(np.random.PCG64(5)), 200) for d in fitted_distributions(scenario)]
    target = "econ.cost.per_token"
    whole = real_engine.resolver.resolve_many([target], held)[target]
    staged = real_engine.resolver.resolve_many([target], held, stage_limit=5)[target]
    assert not whole.stages and len(staged.stages) > 10 and staged.missing == whole.missing == {}
    expected = vectorize(symbols, whole.symbolic)(*draws)
    assert np.allclose(vectorize_resolution(symbols, staged)(*draws), expected, rtol=1e-12, atol=0)


def test_a_condition_comparing_a_piecewise_compiles_without_logic_simplification() -> None:
    # sympy turns `Piecewise(...) <= x` inside a condition into an ITE, and lambdify's numpy printer then
    # runs simplify_logic on it (40 s for the serving model); the compiled form writes it with And/Or/Not
    tp, world, load = sympy.symbols("par.tp par.world load")
    link = sympy.Piecewise((1.0, (tp <= 8) & (world <= 8)), (0.25, True))
    expr = sympy.Piecewise((load, link * load <= 2), (0.0, True))
    assert expr.args[0].cond.has(ITE)
    assert not _for_numpy(expr, {}, {}).has(ITE)
    grid = {tp: np.array([4.0, 4.0, 16.0, 16.0]), world: np.array([8.0, 8.0, 64.0, 64.0]),
            load: np.array([1.0, 3.0, 7.0, 9.0])}
    symbols = sorted(grid, key=lambda s: s.name)
    expected = [float(expr.subs({s: grid[s][i] for s in symbols})) for i in range(4)]
    assert list(vectorize(symbols, expr)(*(grid[s] for s in symbols))) == expected == [1.0, 0.0, 7.0, 0.0]
