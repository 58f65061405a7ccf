"""The learning model of catalog/learning: the loss trajectory integrates to Hoffmann et al.'s law at the
effective tokens, corruption lifts the loss, and the learning fit recovers known roots from rows the model
itself generated (the numeric path of the calibration's row models)."""

from __future__ import annotations

import math

import pytest

from gpustack_sim.analyses.calibrate import RowModels, fit, territory
from gpustack_sim.analyses.measured import Row, Setup

NAT = 1 / math.log(2)  # bit per nat, the base unit of information
CONDITION = {"learning.model.params": 2.0e6, "learning.tokens": "4e6 token", "learning.replicas": 4,
             "learning.local_steps": 1, "learning.outer_lr": 1, "learning.outer_momentum": 0,
             "learning.fault.rollback_rate": 0, "learning.fault.replay_rate": 0, "learning.fault.staleness": 0,
             "learning.fault.corruption_rate": 0, "learning.fault.straggler_rate": 0,
             "learning.fault.steps_lost_per_rollback": 0}
TRUE = {"learning.loss.irreducible": "1.2 nat/token", "learning.loss.data_coeff": "60 nat/token",
        "learning.loss.data_exponent": 0.3, "learning.progress.local_step_penalty_sgd": 0.02,
        "learning.progress.local_step_penalty_diloco": 0.01, "learning.progress.staleness_penalty": 0.2,
        "learning.progress.replay_worth": 0.8, "learning.fault.corruption_damage": "1e-8 nat/token**2",
        "learning.loss.param_coeff": "406.4 nat/token", "learning.loss.param_exponent": 0.34}


def law(c: dict, eta: float) -> float:
    n, d = c["learning.model.params"], float(c["learning.tokens"].split()[0])
    return 1.2 + 406.4 / n ** 0.34 + 60 / (eta * d) ** 0.3


def loss(engine, **changes) -> float:
    res = engine.resolve("learning.loss.final", engine.scenario(assign={**CONDITION, **TRUE, **changes}))
    assert res.value is not None, res.missing
    return res.value


def test_trajectory_integrates_to_the_law_at_the_effective_tokens(engine):
    assert loss(engine) == pytest.approx(law(CONDITION, 1.0), rel=1e-9)
    # local SGD at H = 8 on 4 replicas: eta = 1 / (1 + 0.02 * 7 * 3/4)
    assert loss(engine, **{"learning.local_steps": 8}) == pytest.approx(law(CONDITION, 1 / (1 + 0.02 * 7 * 0.75)))
    # DiLoCo (outer momentum) takes its own penalty
    diloco = loss(engine, **{"learning.local_steps": 8, "learning.outer_momentum": 0.9, "learning.outer_lr": 0.7})
    assert diloco == pytest.approx(law(CONDITION, 1 / (1 + 0.01 * 7 * 0.75)))
    # one replica has nothing to average: H costs nothing
    assert loss(engine, **{"learning.local_steps": 8, "learning.replicas": 1}) == pytest.approx(law(CONDITION, 1.0))
    rollback = loss(engine, **{"learning.fault.rollback_rate": 0.01, "learning.fault.steps_lost_per_rollback": 10})
    assert rollback == pytest.approx(law(CONDITION, 0.9))  # a tenth of the steps lost


def test_corruption_lifts_the_loss_above_the_law(engine):
    clean = loss(engine)
    corrupted = loss(engine, **{"learning.fault.corruption_rate": 0.05})
    assert corrupted > clean
    more = loss(engine, **{"learning.fault.corruption_rate": 0.2})
    assert more > corrupted


def test_learning_fit_recovers_roots_from_rows_the_model_made(engine):
    spec = engine.facts.learning_fit
    grid = [{"learning.local_steps": h, "learning.tokens": f"{d} token"} for h in (1, 4, 16) for d in (2e6, 8e6)]
    grid += [{"learning.fault.staleness": 2}, {"learning.fault.staleness": 4}]
    rows = []
    for i, change in enumerate(grid):
        measured = loss(engine, **change)
        rows.append(Row(f"r{i}", "synthetic", f"test:{i}", "synthetic", None, "learning.loss.final", measured,
                        measured, measured, component=Setup(assign={**CONDITION, **change})))
    models = RowModels(engine.resolver, engine.scenarios, engine.facts.run_fields, rows, spec.parameters, spec.held,
                       identified_only=True)
    keys = [p.key for p in models.params]
    # no DiLoCo, replay or corruption condition among the rows: those roots are not fitted
    assert "local_step_penalty_diloco" not in keys and "replay_worth" not in keys
    assert "corruption_damage" not in keys and "local_step_penalty_sgd" in keys
    result = fit(models)
    assert result.values["loss_irreducible"] == pytest.approx(1.2 * NAT, rel=0.02)
    assert result.values["loss_data_exponent"] == pytest.approx(0.3, rel=0.02)
    assert result.values["local_step_penalty_sgd"] == pytest.approx(0.02, rel=0.05)
    assert result.values["staleness_penalty"] == pytest.approx(0.2, rel=0.05)
    seen = territory(rows, engine.scenarios)
    assert seen["learning.local_steps"] == (1, 16) and seen["learning.fault.staleness"] == (0, 4)


def _observation(steps: int):
    from gpustack_sim.datacenter.policies import Observation

    return Observation(elapsed_s=10.0 * steps, failures=(), measured_step_time_s=1.0, steps_completed=steps,
                       checkpoints_completed=0, last_checkpoint_s=None, nodes=8, spares_available=None,
                       checkpoint_interval_s=None)


def _controller(**territory):
    from gpustack_sim.experiments.panels.e001 import CadenceController

    # a communication share of (0.5 + 1) / (1 + 1) = 0.75 at H = 1: the rule doubles the local steps
    return CadenceController(checkpoint_s=60, mtbf_s=3.6e4, step_s=1.0, exposed_comm_s=0.5, stall_s=1.0,
                             local_steps=1, double_at=0.45, halve_at=0.2, **territory)


def test_adaptive_controller_abstains_outside_the_calibrated_territory():
    inside = _controller(territory_h=(1, 16))
    inside.decide(_observation(0))
    assert inside.local_steps == 2 and not inside.abstentions
    outside = _controller(territory_h=(1, 1))
    outside.decide(_observation(0))
    assert outside.local_steps == 1
    assert outside.abstentions == ["at 0 s: H = 2 is outside the measured local steps [1, 1]; fell back to the "
                                   "synchronous cadence"]
    uncalibrated = _controller()
    uncalibrated.decide(_observation(0))
    assert uncalibrated.local_steps == 1 and "no learning calibration" in uncalibrated.abstentions[0]
    wrong_k = _controller(territory_h=(1, 16), outside_k=("learning.replicas = 3 is outside the measured [1, 2]",))
    wrong_k.decide(_observation(0))
    assert wrong_k.local_steps == 1 and "learning.replicas = 3" in wrong_k.abstentions[0]


def test_prevailing_cadence_is_the_one_over_most_steps():
    c = _controller(territory_h=(1, 16))
    c.decide(_observation(0))  # H = 2 from step 0
    c.trajectory.append(4)
    c.steps_at.append(700)
    assert c.prevailing(1000) == 2
    assert c.prevailing(2000) == 4
