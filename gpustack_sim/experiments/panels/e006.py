"""E006 Firm grid-responsive inference: an inference fleet bidding a firm power reduction to the grid,
combining mechanisms, against each mechanism alone. It needs an inference-serving simulation and grid
signals handled inside the replay, neither of which the datacenter has: every metric is unresolved."""

from __future__ import annotations

from .base import Capability, Panel
from .common import GRID_EVENTS, INFERENCE_SERVING

POWER_RESPONSE = Capability(
    "accelerator_power_response",
    "how accelerator power, clocks and throughput respond to a power cap over time (ramp and settling)")


class E006(Panel):
    protocol_id = "E006"
    arms = ("power_capping_only", "request_shedding_only", "request_migration_only", "firm_grid_response")
    missing = (INFERENCE_SERVING, GRID_EVENTS, POWER_RESPONSE)
