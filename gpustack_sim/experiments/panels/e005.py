"""E005 Heterogeneous co-design: under one power envelope, mixed hardware with the architecture co-designed
for it, against a uniform cluster and mixed hardware with the architecture unchanged. The datacenter
runs one job on one accelerator type, and no model maps architecture and compute to task capability,
so every metric is unresolved."""

from __future__ import annotations

from .base import Capability, Panel
from .common import LEARNING_MODEL

HETEROGENEOUS_JOB = Capability(
    "heterogeneous_job",
    "one job spread over several accelerator types with per-class step times, power and FLOP shares")
CAPABILITY_MODEL = Capability(
    "capability_evaluation_model",
    "task-family capability scores as a function of the architecture and the training compute")


class E005(Panel):
    protocol_id = "E005"
    arms = ("uniform_cluster", "heterogeneous_fixed_architecture", "heterogeneous_codesign")
    missing = (HETEROGENEOUS_JOB, CAPABILITY_MODEL, LEARNING_MODEL)
