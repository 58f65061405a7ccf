"""Checkpoint and operations policies. A policy sees only an `Observation`, an immutable snapshot of what
an operator could have measured so far, and answers with `Intervention`s applied at that decision epoch.

The snapshot holds plain numbers and tuples, no reference to the simulator, its event queue or its random
generators, and the next failure is drawn only when it happens: there is no future to peek at."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

from gpustack_compiler.base.errors import InputError


@dataclass(frozen=True)
class ObservedFailure:
    time_s: float
    cause: str


@dataclass(frozen=True)
class Observation:
    elapsed_s: float
    failures: tuple[ObservedFailure, ...]
    measured_step_time_s: float | None  # mean over the steps completed so far; None before the first
    steps_completed: int
    checkpoints_completed: int
    last_checkpoint_s: float | None
    nodes: int
    spares_available: int | None  # None: the reservation's spares are not limited
    checkpoint_interval_s: float | None  # in force before this epoch; None at the start
    site_nodes: tuple[tuple[str, int], ...] = ()  # nodes in the job per site, in the sites file's order
    power_caps_w: tuple[tuple[str, float], ...] = ()  # operator's cap per site (without a sites file: none)
    layout: str | None = None  # the parallel layout in force (a key of simulate's `layouts`), if any


@dataclass(frozen=True)
class SetCheckpointInterval:
    seconds: float


@dataclass(frozen=True)
class ChangeMembership:
    """Drop (negative) or add (positive) nodes; the global batch is kept, so the step time scales. Added
    nodes come from the spares. `site`: where (None: the first site of the placement)."""

    nodes: int
    site: str | None = None


@dataclass(frozen=True)
class SetSyncCadence:
    local_steps: int


@dataclass(frozen=True)
class SetPowerCap:
    """The operator's power cap of a site, at most its cooling and grid limits; the job's membership there
    follows what the cap feeds (and comes back, up to the job's allocation, when the cap is raised)."""

    site: str
    watts: float


@dataclass(frozen=True)
class Migrate:
    """Move `nodes` of the job from one site to another: the state crosses the WAN link (checkpoint size /
    bandwidth + latency, at the link's earliest free time), the moved nodes idle until it has arrived."""

    from_site: str
    to_site: str
    nodes: int


@dataclass(frozen=True)
class SetLayout:
    """Switch to another parallel layout (a key of simulate's `layouts`): a restart from the latest
    checkpoint (re-initialisation and checkpoint load of the new layout)."""

    name: str


Intervention = SetCheckpointInterval | ChangeMembership | SetSyncCadence | SetPowerCap | Migrate | SetLayout


class Policy(Protocol):
    name: str

    def decide(self, obs: Observation) -> tuple[Intervention, ...]: ...


def daly_interval(checkpoint_s: float, mtbf_s: float) -> float:
    """Daly's higher-order optimum compute time between checkpoints (2006, eq. 37), as the catalog's
    `cluster.ckpt.interval_daly.perturbation` relation defines it."""
    if checkpoint_s >= 2 * mtbf_s:
        return mtbf_s
    ratio = checkpoint_s / (2 * mtbf_s)
    return math.sqrt(2 * checkpoint_s * mtbf_s) * (1 + math.sqrt(ratio) / 3 + ratio / 9) - checkpoint_s


@dataclass(frozen=True)
class FixedInterval:
    interval_s: float
    name: str = "fixed"

    def decide(self, obs: Observation) -> tuple[Intervention, ...]:
        return () if obs.checkpoint_interval_s == self.interval_s else (SetCheckpointInterval(self.interval_s),)


@dataclass(frozen=True)
class DalyInterval:
    """Daly's interval from the catalog's job MTBF and checkpoint (blocking) time, set once."""

    checkpoint_s: float
    mtbf_s: float
    name: str = "daly"

    def decide(self, obs: Observation) -> tuple[Intervention, ...]:
        interval = daly_interval(self.checkpoint_s, self.mtbf_s)
        return () if obs.checkpoint_interval_s == interval else (SetCheckpointInterval(interval),)


@dataclass(frozen=True)
class AdaptiveInterval:
    """Daly's interval from the MTBF estimated from the failures seen so far. The catalog's MTBF enters as
    one pseudo-failure (a conjugate gamma prior), so the estimate starts there and follows the data:
    M = (prior_mtbf + elapsed) / (1 + failures seen)."""

    checkpoint_s: float
    prior_mtbf_s: float
    name: str = "adaptive"

    def decide(self, obs: Observation) -> tuple[Intervention, ...]:
        mtbf = (self.prior_mtbf_s + obs.elapsed_s) / (1 + len(obs.failures))
        interval = daly_interval(self.checkpoint_s, mtbf)
        return () if obs.checkpoint_interval_s == interval else (SetCheckpointInterval(interval),)


POLICY_NAMES = ("fixed", "daly", "adaptive")


def make_policy(name: str, checkpoint_s: float, mtbf_s: float, interval_s: float | None = None) -> Policy:
    if name == "fixed":
        if interval_s is None:
            raise InputError("policy fixed: needs an interval (--interval SECONDS)")
        return FixedInterval(interval_s)
    if name == "daly":
        return DalyInterval(checkpoint_s, mtbf_s)
    if name == "adaptive":
        return AdaptiveInterval(checkpoint_s, mtbf_s)
    raise InputError(f"policy {name!r}: unknown", f"one of {', '.join(POLICY_NAMES)}")
