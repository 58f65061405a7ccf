"""What a panel is: the arms of one protocol and how its metrics are computed from the virtual
datacenter. The generic runner (`..runner`) owns seeds, replications, intervals, falsifiers, evidence,
conclusions and artifacts; a panel only says what to replay and what each replication's numbers mean.

A metric the system cannot compute is `Unresolved`, naming the missing capability: never a stand-in
number."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ...api import Engine
    from ..protocol import Protocol


@dataclass(frozen=True)
class Capability:
    name: str
    description: str


@dataclass(frozen=True)
class MeanSample:
    """One value per replication (paired across arms by the common seed), in `unit`."""

    values: tuple[float, ...]
    unit: str
    notes: tuple[str, ...] = ()
    evidence: str = "modeled"  # an evidence class (results.EvidenceClass): computed by the engine unless measured


@dataclass(frozen=True)
class ProportionSample:
    successes: int
    trials: int
    notes: tuple[str, ...] = ()
    unit: str = "1"
    evidence: str = "modeled"


@dataclass(frozen=True)
class Unresolved:
    missing: tuple[Capability, ...]
    notes: tuple[str, ...] = ()
    evidence: str = "unmeasured"  # or inadmissible: a measurement that failed its admissibility check


MetricOutcome = MeanSample | ProportionSample | Unresolved


@dataclass
class PanelContext:
    """What a panel may use while preparing: the protocol, the repository root (scenario files are
    relative to it) and the engine (opened on first use)."""

    protocol: Protocol
    root: Path
    stage: str
    engine_factory: Any
    _engine: Engine | None = field(default=None, repr=False)

    @property
    def engine(self) -> Engine:
        if self._engine is None:
            self._engine = self.engine_factory()
        return self._engine

    def path(self, relative: str) -> Path:
        return self.root / relative


@dataclass(frozen=True)
class Prepared:
    """A panel's setup: `state` goes to every worker (picklable); assumptions and data ids go to the artifact."""

    state: Any
    assumptions: tuple[str, ...] = ()
    calibration_ids: tuple[tuple[str, str], ...] = ()  # (sha256:<hex>, what it is)
    replays: bool = True  # False: nothing the datacenter can replay; no replications are run
    local: Any = None  # what `metrics` uses in this process only (an engine-backed model), never sent to workers


class Panel:
    """Subclass per protocol: set `protocol_id` and `arms`, implement `prepare`, `replay` and `metrics`. A
    panel whose every metric waits on a capability names it in `missing` and implements nothing."""

    protocol_id: str = ""
    arms: tuple[str, ...] = ()
    missing: tuple[Capability, ...] = ()  # capabilities without which no metric of the protocol resolves

    def prepare(self, ctx: PanelContext) -> Prepared:
        return Prepared(None, replays=False)

    def replay(self, state: Any, arm: str, seed: int) -> dict:
        """One replication of one arm; must return `failure_times_ns` (a tuple) for the common-random-numbers
        check, and whatever `metrics` needs."""
        raise NotImplementedError

    def metrics(self, state: Any, observations: Mapping[str, Sequence[dict]]) -> dict[str, MetricOutcome]:
        return {}  # nothing resolved: the metrics are named unresolved by `missing`

    def observed(self, observations_dir: Path, metric_names: Sequence[str]) -> dict[str, MetricOutcome]:
        """Metrics from measured observations (stages above virtual). No panel analyses measurements yet."""
        missing = (Capability("measured_observation_analysis",
                              f"computing {self.protocol_id}'s metrics from measured observations"),)
        return {name: Unresolved(missing) for name in metric_names}


def unresolved_all(names: Sequence[str], *capabilities: Capability, notes: Sequence[str] = ()) -> dict[str, Unresolved]:
    return {n: Unresolved(tuple(capabilities), tuple(notes)) for n in names}


def paired(observations: Mapping[str, Sequence[dict]], numerator: str, denominator: str,
           key: str) -> tuple[float, ...]:
    """Per-replication ratio numerator[key] / denominator[key] of two arms on the same seeds."""
    return tuple(a[key] / b[key] for a, b in zip(observations[numerator], observations[denominator]))
