"""E004 Fluid inference topology: an inference fleet that moves requests while serving them, against the
best static topology and independent controllers. The virtual datacenter replays training jobs only:
every metric needs an inference-serving simulation and workload traces, so every metric is unresolved."""

from __future__ import annotations

from .base import Capability, Panel
from .common import INFERENCE_SERVING

WORKLOAD_TRACES = Capability(
    "inference_workload_families",
    "request traces of several workload families (arrival process, prompt and output lengths) to replay")


class E004(Panel):
    protocol_id = "E004"
    arms = ("best_static_topology", "independent_controllers", "fluid_topology")
    missing = (INFERENCE_SERVING, WORKLOAD_TRACES)
