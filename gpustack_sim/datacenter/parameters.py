"""What the replay needs to know about one training job, in SI base units. Base units are the catalog's: s,
W, token and bit (so data sizes are in bits, `checkpoint_bits`). Which catalog variable supplies each value,
and which kinds of part fail, is catalog/bindings/training_replay.yaml's business: nothing here holds a
physical number or a catalog name, every value arrives through `from_values`."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from gpustack_compiler.base.errors import InputError

if TYPE_CHECKING:
    from ..engine.facts import TrainingReplay


@dataclass(frozen=True)
class FailureClass:
    """Independent exponential failures of one kind of part: `rate_per_unit_s` per part and second,
    `units` parts of it exposed per `per` (gpu, node, link, switch or job). `rate_sd_per_unit_s` is the
    rate's own uncertainty where its source gives one (a fleet's failure count over its exposure): each
    replication then draws its rate, so the band over replications holds it beside the Poisson noise."""

    name: str
    variable: str
    rate_per_unit_s: float
    per: str
    units_per: float
    rate_sd_per_unit_s: float = 0.0

    def rate_s(self, nodes: int, gpus_per_node: int, links: float, switches: float) -> float:
        """Failures per second of the whole job's exposure to this class."""
        scale = {"gpu": nodes * gpus_per_node, "node": nodes, "link": links, "switch": switches, "job": 1}[self.per]
        return self.rate_per_unit_s * self.units_per * scale


@dataclass(frozen=True)
class JobParameters:
    step_time_s: float
    exposed_comm_s: float
    tokens_per_step: float
    tokens_per_second: float
    token_budget: float
    checkpoint_bits: float
    checkpoint_blocking_s: float
    checkpoint_write_s: float
    checkpoint_load_s: float
    checkpoint_interval_s: float
    detection_s: float
    reinit_s: float
    requeue_s: float
    nodes: int
    gpus_per_node: int
    gpus: int
    job_links: float
    job_switches: float
    job_mtbf_s: float
    model_sync_bits: float
    node_power_compute_w: float | None
    node_power_communication_w: float | None
    node_power_checkpoint_w: float | None
    node_power_idle_w: float | None
    node_power_recovery_w: float | None
    failure_classes: tuple[FailureClass, ...] = ()
    excluded_failure_classes: tuple[str, ...] = ()
    catalog_wallclock_s: float | None = None
    catalog_availability: float | None = None

    @property
    def restart_s(self) -> float:
        """Daly's R: from a failure to resumed training (detection, re-initialisation, checkpoint load)."""
        return self.detection_s + self.reinit_s + self.checkpoint_load_s

    @property
    def total_steps(self) -> int:
        return math.ceil(self.token_budget / self.tokens_per_step)

    def job_failure_rate_s(self, nodes: int | None = None) -> float:
        n = self.nodes if nodes is None else nodes
        return sum(c.rate_s(n, self.gpus_per_node, self.job_links, self.job_switches) for c in self.failure_classes)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_values(cls, values: Mapping[str, float], binding: TrainingReplay,
                    failure_classes: tuple[FailureClass, ...] = (),
                    excluded_failure_classes: tuple[str, ...] = ()) -> JobParameters:
        """From resolved catalog values in base units, keyed by catalog variable (as `binding` names them)."""
        missing = [var for _, var, optional in binding.parameters if not optional and var not in values]
        missing += [var for var in (binding.params, binding.bytes_per_param) if var not in values]
        if missing:
            raise InputError(f"catalog variables not resolved for the simulation: {', '.join(missing)}",
                            "assign them in the run file or a preset")
        # Rates first: a bad rate also spoils the MTBF and the interval derived from it.
        for cls_ in failure_classes:
            if not math.isfinite(cls_.rate_per_unit_s) or cls_.rate_per_unit_s < 0:
                raise InputError(f"{cls_.variable}: failure rate {cls_.rate_per_unit_s!r} is negative or not finite")
            if not math.isfinite(cls_.rate_sd_per_unit_s) or cls_.rate_sd_per_unit_s < 0:
                raise InputError(f"{cls_.variable}: failure rate sd {cls_.rate_sd_per_unit_s!r} is negative or not "
                                 "finite")
        got = {}
        for fld, var, _ in binding.parameters:
            value = values.get(var)
            if value is not None and (not math.isfinite(value) or value < 0):
                raise InputError(f"{var}: {value!r} is not a finite non-negative number (parameter {fld})")
            got[fld] = value
        for fld in COUNT_FIELDS:
            got[fld] = round(got[fld])
        got["model_sync_bits"] = values[binding.params] * values[binding.bytes_per_param]
        return cls(**got, failure_classes=failure_classes, excluded_failure_classes=excluded_failure_classes)


COUNT_FIELDS = ("nodes", "gpus_per_node", "gpus")


def failure_classes(values: Mapping[str, float], binding: TrainingReplay, fleet: bool,
                    sds: Mapping[str, float] | None = None) -> tuple[tuple[FailureClass, ...], tuple[str, ...]]:
    """The failure classes with a resolved rate, and the names of those left out for want of one; `sds`, the
    uncertainty of rates assigned with one (base units).

    `fleet`: the catalog's job failure rate takes the binding's fleet variant. The fleet-measured per-node
    rate already lumps every infrastructure part, so the component classes are then not added to it."""
    sds = sds or {}

    def make(name: str, rate: str, per: str, count: str | None) -> FailureClass | None:
        if rate not in values or (count is not None and count not in values):
            return None
        return FailureClass(name, rate, values[rate], per, 1.0 if count is None else values[count], sds.get(rate, 0.0))

    if fleet:
        fc = binding.fleet_class
        found = make(fc.name, fc.rate, fc.per, fc.count)
        if found is None:
            return (), (binding.fleet_class.name,)
        return (found,), ()
    made = {c.name: make(c.name, c.rate, c.per, c.count) for c in binding.failure_classes}
    for agg in binding.aggregate_classes:
        if any(made[p] is None for p in agg.parts) and agg.rate in values:
            for p in agg.parts:
                made.pop(p)
            made[agg.name] = make(agg.name, agg.rate, agg.per, None)
    return (tuple(c for c in made.values() if c is not None),
            tuple(sorted(n for n, c in made.items() if c is None)))
