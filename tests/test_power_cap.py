"""A GPU under a board power cap (catalog/gpu/power_cap.yaml through gpustack_sim.power): the V-f-P
balance, the two phases' different response, and the roots it names when uncalibrated. The values of the
uncalibrated roots below are test values, not catalog data."""

from __future__ import annotations

import pytest
from helpers import REPO, Engine

from gpustack_compiler.base.errors import InputError, ResolveError

PRESETS = ["gpu_h100_sxm", "power_node_h100_measured"]
VARIANTS = {"gpu.clock.boost": "datasheet"}
TEST_ROOTS = {"gpu.cap.vf_slope": "0.6", "gpu.cap.activity_memory": "0.5", "gpu.cap.memory_knee": "0.5"}


@pytest.fixture(scope="module")
def scenario(real_engine: Engine):
    return real_engine.scenarios.build(PRESETS, TEST_ROOTS, VARIANTS)


def cap(real_engine: Engine, scenario, watts: float):
    from gpustack_sim.power import power_under_cap

    return power_under_cap(real_engine.resolver, real_engine.scenarios, scenario, watts)


def test_uncalibrated_roots_are_named_not_filled(real_engine: Engine) -> None:
    res = cap(real_engine, real_engine.scenarios.build(PRESETS, variants=VARIANTS), 500.0)
    assert not res.resolved and set(res.values.values()) == {None}
    assert res.missing == {"gpu.cap.activity_memory": "gpu_dvfs", "gpu.cap.memory_knee": "gpu_dvfs",
                           "gpu.cap.vf_slope": "gpu_dvfs"}


def test_at_the_board_limit_dense_work_runs_at_the_datasheet_clock(real_engine: Engine, scenario) -> None:
    res = cap(real_engine, scenario, 700.0)
    assert res.values["clock_compute"] == pytest.approx(1830.0, rel=1e-9)
    assert res.values["power_compute"] == pytest.approx(700.0, rel=1e-9)
    assert res.values["throughput_compute"] == pytest.approx(1.0, rel=1e-9)
    # a memory-bound phase switches less: the limit does not bind it below the vendor's top clock
    assert res.values["clock_memory"] == pytest.approx(1980.0, rel=1e-9)
    assert res.values["power_memory"] < 700.0


@pytest.mark.parametrize("watts", [600.0, 450.0, 300.0, 200.0])
def test_a_binding_cap_is_drawn_exactly_and_slows_compute_more(real_engine: Engine, scenario, watts) -> None:
    res = cap(real_engine, scenario, watts)
    v = res.values
    assert v["power_compute"] == pytest.approx(watts, rel=1e-9)
    # P = P_wait + P_dyn,ref x (1 - s + s x) ^ 2 x, by hand at the clock found
    x = v["clock_compute"] / 1830.0
    assert 145.0 + 555.0 * x * (1 - 0.6 + 0.6 * x) ** 2 == pytest.approx(watts, rel=1e-9)
    assert v["throughput_compute"] == pytest.approx(x, rel=1e-12)
    assert v["clock_memory"] > v["clock_compute"] and v["throughput_memory"] >= v["throughput_compute"]
    assert v["power_memory"] <= watts * (1 + 1e-9)


def test_throughput_falls_monotonically_with_the_cap(real_engine: Engine, scenario) -> None:
    compute = [cap(real_engine, scenario, w).values["throughput_compute"] for w in (650, 550, 450, 350, 250)]
    assert compute == sorted(compute, reverse=True) and compute[-1] < 0.5
    low = cap(real_engine, scenario, 160.0).values
    assert low["throughput_memory"] < 1.0  # below the knee a memory-bound phase slows too


def test_a_cap_must_be_a_positive_number_and_above_the_waiting_draw(real_engine: Engine, scenario) -> None:
    with pytest.raises(InputError, match="not a positive number"):
        cap(real_engine, scenario, -5.0)
    # below the 145 W a waiting H100 draws, no clock balances the cap: the resolution says which relation
    with pytest.raises(ResolveError, match="gpu.cap.clock_ratio_fit_compute.cv2f: no fixed point"):
        cap(real_engine, scenario, 100.0)
    fits = real_engine.resolver.resolve("gpu.cap.clock_compute", real_engine.scenarios.build(
        PRESETS, {**TEST_ROOTS, "gpu.cap.power": "300 W"}, VARIANTS))
    assert {c.name: c.status for c in fits.checks if c.kind == "constraint"}["gpu.cap.power.above_waiting"] == \
        "satisfied"


def test_the_capped_clock_reaches_the_estimate(real_engine: Engine) -> None:
    """With the clock variant `power_capped` a low cap lengthens the README run's step; uncapped it does not."""
    run = real_engine.load_run(REPO / "runs" / "llama70b_1024xh100.yaml")

    def step(watts: float) -> float:
        capped = run.with_extras(assign={**TEST_ROOTS, "gpu.cap.power": f"{watts} W"},
                                    variants={"gpu.clock.boost": "power_capped"})
        return real_engine.resolver.resolve("training.t_step", real_engine.run_scenario(capped)).value

    plain = real_engine.resolver.resolve("training.t_step", real_engine.run_scenario(run)).value
    assert step(700.0) == pytest.approx(plain, rel=1e-12)
    assert step(350.0) > plain * 1.01
