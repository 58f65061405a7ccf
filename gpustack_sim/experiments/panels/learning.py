"""The learning model as a panel uses it: the catalog's learning.loss.final (catalog/learning) at the local
condition the learning calibration measured, with the replay's cadence and lost work as its roots, and the
territory that calibration has seen. Outside it the model abstains, naming the root and the range: never a guess.

Every figure is the local small model's (calibration_learning was fitted on this machine's CPUs): it states how
a cadence and a share of lost work move that model's progress per FLOP, not a frontier model's."""

from __future__ import annotations

from dataclasses import dataclass, field

from .base import Capability

LEARNING_CALIBRATION = Capability(
    "learning_calibration",
    "the learning roots fitted to the local learning workload (`gpustack calibrate --learning` writes "
    "catalog/presets/calibration_learning.yaml from data/observations/local_learning.yaml)")
PRESET = "calibration_learning"
HONESTY = ("learning figures come from the learning model calibrated on a local small model (calibration_learning, "
           "fitted on this machine's CPUs); they state what a cadence and lost work do to that model's progress per "
           "FLOP, with no claim of transfer to frontier-scale training")


@dataclass
class LearningModel:
    """The catalog's learning model at the largest local condition measured, memoised by its inputs."""

    engine: object
    territory: dict[str, tuple[float, float]]
    _memo: dict = field(default_factory=dict, repr=False)

    @classmethod
    def from_catalog(cls, engine) -> LearningModel | None:
        preset = engine.tables.presets.get(PRESET)
        if preset is None:
            return None
        seen = (preset.get("fit") or {}).get("territory") or {}
        return cls(engine, {k: (float(v[0]), float(v[1])) for k, v in seen.items()})

    def outside(self, **values: float) -> list[str]:
        """Why the model abstains at these condition roots (learning.<name>): each root outside the range the
        calibration measured, or never measured at all."""
        reasons = []
        for name, value in values.items():
            root = f"learning.{name}"
            if root not in self.territory:
                reasons.append(f"{root} = {value:g} was never varied in the local measurements")
                continue
            lo, hi = self.territory[root]
            if not lo - 1e-12 <= value <= hi + 1e-12:
                reasons.append(f"{root} = {value:g} is outside the measured [{lo:g}, {hi:g}]")
        return reasons

    def progress_per_flop(self, local_steps: float, replicas: float, rollbacks_per_step: float,
                          steps_lost_per_rollback: float) -> tuple[float, float]:
        """(loss reduction per FLOP, final loss) of the local model with these roots: its largest measured
        token budget of useful tokens, the steps lost to rollbacks processed again (FLOPs count them). The
        reduction is from the loss the synchronous clean run has at a tenth of the budget, where the
        trajectory starts."""
        key = (local_steps, replicas, rollbacks_per_step, steps_lost_per_rollback)
        if key not in self._memo:
            self._memo[key] = self._evaluate(*key)
        return self._memo[key]

    def _condition(self, local_steps: float, replicas: float, rollbacks_per_step: float,
                   steps_lost_per_rollback: float) -> dict:
        lost = rollbacks_per_step * steps_lost_per_rollback
        tokens = self.territory["learning.tokens"][1] / (1 - lost)
        return {"learning.model.params": self.territory["learning.model.params"][1],
                "learning.tokens": f"{tokens!r} token", "learning.replicas": replicas,
                "learning.local_steps": local_steps, "learning.outer_lr": 1, "learning.outer_momentum": 0,
                "learning.fault.rollback_rate": rollbacks_per_step,
                "learning.fault.steps_lost_per_rollback": steps_lost_per_rollback, "learning.fault.replay_rate": 0,
                "learning.fault.staleness": 0, "learning.fault.corruption_rate": 0,
                "learning.fault.straggler_rate": 0}

    def _value(self, target: str, condition: dict) -> float:
        res = self.engine.resolve(target, self.engine.scenario([PRESET], condition))
        if res.value is None:
            raise ValueError(f"{target} needs {', '.join(sorted(res.missing))}")
        return res.value

    def _evaluate(self, local_steps: float, replicas: float, rollbacks_per_step: float,
                  steps_lost_per_rollback: float) -> tuple[float, float]:
        start = self._memo.get("start")
        if start is None:
            start = self._memo["start"] = self._value("learning.loss.start", self._condition(1, replicas, 0.0, 0.0))
        condition = self._condition(local_steps, replicas, rollbacks_per_step, steps_lost_per_rollback)
        final = self._value("learning.loss.final", condition)
        return (start - final) / self._value("learning.flops", condition), final
