"""Measured loss curves of the local learning workload as a panel reads them at the real stage: an observation
file (schemas/observations.schema.json) whose rows are local learning conditions, each seed's curve a JSON file
beside it (`learning.curves`, relative to the file's folder) with its evaluations under `points`.

A file or curve that lacks what a metric needs is refused with one line naming the file, the observation and
the missing series; an inadmissible condition (diverged, too few seeds, too sparse a curve) is kept out and
counted, never scored."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from gpustack_compiler.errors import InputError

from ...engine.observation import load_file

# What a curve's points must carry for progress per FLOP: loss against FLOPs from the first evaluation on.
PROGRESS_SERIES = ("flops", "loss")


@dataclass(frozen=True)
class Condition:
    id: str  # the observation id
    local_steps: int
    replicas: int
    clean: bool  # no injected fault
    curves: dict[int, list[dict]]  # seed -> points
    inadmissible: str | None


def read_conditions(path: Path, series: tuple[str, ...] = PROGRESS_SERIES) -> list[Condition]:
    """Every local learning condition of one observation file, with its curves read and checked."""
    out = []
    for item in load_file(path):
        setup = item.obs.learning
        if setup is None:
            raise InputError(f"{item.where}: observation `{item.obs.id}` is not a local learning condition "
                             "(no `learning` block): the real stage reads loss curves")
        curves = {}
        for seed, rel in zip(setup.seeds, setup.curves):
            curve = path.parent / rel
            if not curve.is_file():
                raise InputError(f"{item.where}: observation `{item.obs.id}`: curve {rel} not found beside {path.name}")
            try:
                points = json.loads(curve.read_text(encoding="utf-8")).get("points")
            except (OSError, ValueError, AttributeError) as exc:
                raise InputError(f"{curve}: not a readable curve ({exc})") from None
            if not isinstance(points, list) or len(points) < 2:
                raise InputError(f"{curve}: observation `{item.obs.id}`: no `points` series of at least two "
                                 "evaluations")
            missing = [s for s in series if not all(isinstance(p, dict) and isinstance(p.get(s), (int, float))
                                                    for p in points)]
            if missing:
                raise InputError(f"{curve}: observation `{item.obs.id}`: missing series {', '.join(missing)} "
                                 "(progress per FLOP needs loss against FLOPs)")
            curves[seed] = points
        a = setup.assign
        faults = [k for k in a if k.startswith("learning.fault.") and float(a[k]) != 0]
        out.append(Condition(item.obs.id, int(a["learning.local_steps"]), int(a["learning.replicas"]), not faults,
                             curves, item.obs.inadmissible))
    return out


def progress_per_flop(points: list[dict]) -> float:
    """Loss reduction from the first evaluation to the last, per FLOP spent between them."""
    return (points[0]["loss"] - points[-1]["loss"]) / (points[-1]["flops"] - points[0]["flops"])
