"""E003 Semantic fault tolerance: failures treated by how much they hurt learning, against uniform
rollback and uniform duplication. Every metric needs a model of learning quality under faults (and
fault injection of silent corruption with a classifier of its semantic impact); the datacenter replays
fail-stop failures and time only, so nothing is replayed and every metric is unresolved."""

from __future__ import annotations

from .base import Capability, Panel
from .common import LEARNING_MODEL

SILENT_FAULTS = Capability(
    "silent_fault_injection",
    "injection of non-fail-stop faults (silent data corruption, stragglers, degraded links) into the replay, "
    "with their effect on gradients; the datacenter's failures are fail-stop only")


class E003(Panel):
    protocol_id = "E003"
    arms = ("uniform_rollback", "uniform_duplication", "semantic_fault_tolerance")
    missing = (LEARNING_MODEL, SILENT_FAULTS)
