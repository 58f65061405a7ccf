"""E003 Semantic fault tolerance: failures treated by how much they hurt learning, against uniform
rollback and uniform duplication. The learning model (catalog/learning) exists, but its loss under corrupted
steps is not calibrated (every local silent-corruption condition is held out for evaluation), and the
datacenter replays fail-stop failures and time only: no silent corruption, straggler or degraded link is
injected and no detector reads observable state. Nothing is replayed and every metric is unresolved."""

from __future__ import annotations

from .base import Capability, Panel

SILENT_FAULTS = Capability(
    "silent_fault_injection",
    "injection of non-fail-stop faults (silent data corruption, stragglers, degraded links) into the replay at "
    "fleet rates, with the observable signals a detector would read (their statistics under clean and faulty "
    "steps); the datacenter's failures are fail-stop only")
CORRUPTION_CALIBRATION = Capability(
    "learning_corruption_calibration",
    "the learning model's damage per corrupted step (learning.fault.corruption_damage) fitted to local "
    "measurements; calibration_learning has none while every local corruption condition is held out")


class E003(Panel):
    protocol_id = "E003"
    arms = ("uniform_rollback", "uniform_duplication", "semantic_fault_tolerance")
    missing = (CORRUPTION_CALIBRATION, SILENT_FAULTS)
