"""Measured loss curves of the local learning workload as a panel reads them at the real stage, through the
workload's own reader (gpustack_sim/learning/curves.py: a file or curve lacking a series is refused in one line
naming the observation and the series). An inadmissible condition is kept out and counted, never scored."""

from __future__ import annotations

from ...learning.curves import MeasuredCondition, MeasuredCurve

# What progress per FLOP needs of each curve: loss against FLOPs.
PROGRESS_SERIES = ("flops", "loss")


def clean(c: MeasuredCondition) -> bool:
    """No fault injected."""
    return not any(float(v) for k, v in c.assign.items() if k.startswith("learning.fault."))


def progress_per_flop(curve: MeasuredCurve) -> float:
    """Loss reduction from the first evaluation to the last, per FLOP spent between them."""
    loss, flops = curve.series["loss"], curve.series["flops"]
    return (loss[0] - loss[-1]) / (flops[-1] - flops[0])
