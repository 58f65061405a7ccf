"""Measured loss curves read back from an observation file (the local workload's now, a cluster's later), for
whatever analyses them (a plot, an experiment's real stage). A file that lacks what the analysis needs is
refused with one line naming the observation and what is missing: a row with no learning setup, a curve
file that is gone or changed since it was written, a series that is absent or empty."""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from pathlib import Path

from gpustack_compiler.base.errors import InputError

REQUIRED_SERIES = ("tokens", "flops", "loss")


@dataclass(frozen=True)
class MeasuredCurve:
    seed: int
    series: dict[str, tuple[float, ...]]  # name -> one value per evaluation, in token order
    events: dict[str, int]
    params_non_embedding: int | None = None  # the model's size, where the curve file records it


@dataclass(frozen=True)
class MeasuredCondition:
    """One observation row with its curves: the condition's catalog roots, its split and admissibility."""

    id: str
    condition: str
    method: str
    split: str
    inadmissible: str | None
    assign: dict[str, float]
    value: float  # the observation's measured value (mean final held-out loss, nat/token)
    curves: tuple[MeasuredCurve, ...]

    def mean(self, name: str) -> list[float]:
        """The series averaged over seeds, point by point (curves of one condition share their cadence)."""
        n = min(len(c.series[name]) for c in self.curves)
        return [math.fsum(c.series[name][i] for c in self.curves) / len(self.curves) for i in range(n)]


def load_measured(path: Path, required: tuple[str, ...] = REQUIRED_SERIES) -> list[MeasuredCondition]:
    from ..engine.observation import load_observations

    if not path.is_file():
        raise InputError(f"{path}: no such observation file")
    out = []
    for item in load_observations([path]):
        setup = item.obs.learning
        if setup is None:
            raise InputError(f"{item.where}: observation `{item.obs.id}` has no `learning` setup, so no measured "
                             f"loss curves ({', '.join(required)})")
        curves = []
        for seed, rel in zip(setup.seeds, setup.curves):
            curves.append(_curve(item.where, item.obs.id, seed, item.file.parent / rel, rel, required))
        out.append(MeasuredCondition(item.obs.id, setup.condition, setup.method, item.obs.split,
                                     item.obs.inadmissible, dict(setup.assign), item.obs.measured.value,
                                     tuple(curves)))
    return out


def _curve(where: str, obs_id: str, seed: int, path: Path, rel: str, required: tuple[str, ...]) -> MeasuredCurve:
    if not path.is_file():
        raise InputError(f"{where}: observation `{obs_id}`: curve {rel} of seed {seed} is missing")
    body = path.read_bytes()
    if path.stem != hashlib.sha256(body).hexdigest():
        raise InputError(f"{where}: observation `{obs_id}`: curve {rel} changed since it was written (its name is "
                         "the SHA-256 of its bytes)")
    try:
        doc = json.loads(body)
        points = doc["points"]
    except (ValueError, KeyError, TypeError):
        raise InputError(f"{where}: observation `{obs_id}`: curve {rel} has no `points`") from None
    series = {}
    for name in required:
        values = [p.get(name) for p in points] if isinstance(points, list) else []
        if not values or any(not isinstance(v, (int, float)) for v in values):
            raise InputError(f"{where}: observation `{obs_id}`: curve {rel} of seed {seed} lacks the series "
                             f"`{name}` (required: {', '.join(required)})")
        series[name] = tuple(float(v) for v in values)
    return MeasuredCurve(seed, series, dict(doc.get("events", {})), doc.get("params_non_embedding"))
