"""Virtual datacenter: a seeded discrete-event replay of a training job (failures, checkpoints, recovery,
power) whose parameters come from resolved catalog values."""

from .api import simulate
from .parameters import FailureClass, JobParameters
from .results import SimulationResult

__all__ = ["FailureClass", "JobParameters", "SimulationResult", "simulate"]
