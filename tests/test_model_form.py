"""The model-form term: split-conformal half-widths from other panels' residuals, by stratum, backing off,
widening outside the panels' territory and abstaining with too few rows (gpustack_sim/analyses/model_form.py)."""

from __future__ import annotations

import math

import pytest
from helpers import REPO

from gpustack_sim import Engine
from gpustack_sim.analyses.model_form import Residual, Stratum, combine, rows_needed, stratum, term
from gpustack_sim.engine.observation import load_observations

H100_DENSE = Stratum("training", "h100", "dense", "megatron_lm_software", "cluster")
H100_MOE = Stratum("training", "h100", "moe_cross_node", "megatron_lm_software", "cluster")


def pool(s: Stratum, errors: list[float], panel: str = "p") -> list[Residual]:
    return [Residual(f"{panel}{i % 3}", s, e) for i, e in enumerate(errors)]


def test_rows_needed_is_the_split_conformal_bound() -> None:
    assert rows_needed(0.9) == 9 and rows_needed(0.5) == 1
    assert math.ceil(0.9 * (9 + 1)) <= 9 and math.ceil(0.9 * (8 + 1)) > 8


def test_the_half_width_is_the_conformal_rank_of_absolute_residuals() -> None:
    errors = [0.01 * k * (-1) ** k for k in range(1, 11)]  # |r| = 0.01 .. 0.10
    t = term(H100_DENSE, pool(H100_DENSE, errors), 0.9)
    # n = 10: the ceil(0.9 x 11) = 10th smallest |r|.
    assert t.half_width == pytest.approx(0.10) and t.n == 10 and t.outside == ()
    t50 = term(H100_DENSE, pool(H100_DENSE, errors), 0.5)
    assert t50.half_width == pytest.approx(0.06)  # ceil(0.5 x 11) = 6th


def test_too_few_rows_back_off_but_keep_their_largest_error_as_a_floor() -> None:
    broad = pool(Stratum("training", "h100", "dense", "none", "node"), [0.02] * 20)
    few_moe = pool(H100_MOE, [0.05, -0.40])
    t = term(H100_MOE, broad + few_moe, 0.9)
    assert t.stratum == ("workload",) and t.half_width == pytest.approx(0.40)
    assert "at least the largest error of the 2" in t.reason


def test_outside_the_territory_the_width_is_the_largest_error_and_says_why() -> None:
    seen = pool(H100_DENSE, [0.01 * k for k in range(1, 13)])
    new_generation = Stratum("training", "b200", "dense", "megatron_lm_software", "cluster")
    t = term(new_generation, seen, 0.9)
    assert t.outside == ("generation",) and t.half_width == pytest.approx(0.12)
    assert "no other panel has generation b200" in t.reason


def test_too_few_rows_in_the_workload_abstain() -> None:
    serving = Stratum("serving", "h100", "dense", "none", "node")
    t = term(serving, pool(H100_DENSE, [0.1] * 20) + pool(serving, [0.3] * 6), 0.9)
    assert t.half_width is None and t.n == 6 and "abstains: 6 serving rows" in t.reason


def test_combine_adds_in_quadrature_on_each_side() -> None:
    lo, hi = combine(100.0, (90.0, 120.0), 0.1)
    assert lo == pytest.approx(100 * math.exp(-math.hypot(0.1, math.log(100 / 90))))
    assert hi == pytest.approx(100 * math.exp(math.hypot(0.1, math.log(1.2))))
    assert combine(100.0, None, 0.1) == pytest.approx((100 * math.exp(-0.1), 100 * math.exp(0.1)))


def test_strata_of_real_rows(engine: Engine) -> None:
    items = {i.obs.id: i for i in load_observations([REPO / "data" / "observations"])}
    facts = engine.facts
    assert stratum(items["deepseek2024-v3-pretraining-2048-h800-v6"].run, facts) == Stratum(
        "training", "h100", "moe_cross_node", "megatron_lm_software", "large")
    assert stratum(items["narayanan2021-t1-gpt-1.7b"].run, facts).generation == "a100"
    serving = stratum(items["azure-h100-vllm-llama31-70b-fp8-tp8-in128-out128"].run, facts)
    assert (serving.workload, serving.kind, serving.scale) == ("serving", "dense", "node")


def test_a_serving_run_abstains_at_90_percent_and_says_why(engine: Engine) -> None:
    # One serving panel of 6 rows: fewer than the 9 a 90% split-conformal quantile needs.
    mf = engine.model_form(engine.load_run(REPO / "runs" / "serve_llama70b_8xh100.yaml"))
    assert mf["stratum"]["workload"] == "serving"
    t90, t50 = mf["terms"]["90%"], mf["terms"]["50%"]
    assert t90["half_width"] is None and t90["reason"].startswith("abstains: 6 serving rows")
    assert t50["half_width"] is not None and t50["n"] == 6
