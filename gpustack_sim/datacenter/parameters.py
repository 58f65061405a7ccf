"""What the replay needs to know about one training job, in SI base units, and which catalog variable
supplies each value. Base units are the catalog's: s, W, token and bit (so data sizes are in
bits, `checkpoint_bits`). Nothing here holds a physical number: every value arrives through `from_values`."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass

from gpustack_compiler.base.errors import InputError


@dataclass(frozen=True)
class FailureClass:
    """Independent exponential failures of one kind of part: `rate_per_unit_s` per part and second,
    `units` parts of it exposed per `per` (gpu, node, link, switch or job)."""

    name: str
    variable: str
    rate_per_unit_s: float
    per: str
    units_per: float

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
    def from_values(cls, values: Mapping[str, float], failure_classes: tuple[FailureClass, ...] = (),
                    excluded_failure_classes: tuple[str, ...] = ()) -> "JobParameters":
        """From resolved catalog values in base units, keyed by catalog variable (see CATALOG_PARAMETERS)."""
        missing = [var for fld, var in CATALOG_PARAMETERS.items() if fld not in OPTIONAL_FIELDS and var not in values]
        missing += [var for var in (PARAMS_VARIABLE, BYTES_PER_PARAM_VARIABLE) if var not in values]
        if missing:
            raise InputError(f"catalog variables not resolved for the simulation: {', '.join(missing)}",
                            "assign them in the run file or a preset")
        # Rates first: a bad rate also spoils the MTBF and the interval derived from it.
        for cls_ in failure_classes:
            if not math.isfinite(cls_.rate_per_unit_s) or cls_.rate_per_unit_s < 0:
                raise InputError(f"{cls_.variable}: failure rate {cls_.rate_per_unit_s!r} is negative or not finite")
        got = {}
        for fld, var in CATALOG_PARAMETERS.items():
            value = values.get(var)
            if value is not None and (not math.isfinite(value) or value < 0):
                raise InputError(f"{var}: {value!r} is not a finite non-negative number (parameter {fld})")
            got[fld] = value
        for fld in COUNT_FIELDS:
            got[fld] = round(got[fld])
        got["model_sync_bits"] = values[PARAMS_VARIABLE] * values[BYTES_PER_PARAM_VARIABLE]
        return cls(**got, failure_classes=failure_classes, excluded_failure_classes=excluded_failure_classes)


# field -> catalog variable that supplies it (values in base units: s, W, bit, token, 1).
CATALOG_PARAMETERS: dict[str, str] = {
    "step_time_s": "training.t_step",
    "exposed_comm_s": "training.t_exposed_comm",
    "tokens_per_step": "arch.tokens_per_step",
    "tokens_per_second": "training.tokens_per_sec",
    "token_budget": "training.total_tokens",
    "checkpoint_bits": "cluster.ckpt.size",
    "checkpoint_blocking_s": "cluster.ckpt.t_blocking",
    "checkpoint_write_s": "cluster.ckpt.t_write",
    "checkpoint_load_s": "cluster.ckpt.t_load",
    "checkpoint_interval_s": "cluster.ckpt.interval",
    "detection_s": "cluster.rel.t_detect",
    "reinit_s": "cluster.rel.t_reinit",
    "requeue_s": "cluster.sched.t_requeue",
    "nodes": "cluster.job.n_nodes",
    "gpus_per_node": "cluster.node.n_gpus",
    "gpus": "par.n_gpus",
    "job_links": "cluster.job.n_links",
    "job_switches": "cluster.job.n_switches",
    "job_mtbf_s": "cluster.rel.job_mtbf",
    # The measured node power is an average over training steps, so it covers compute and the exposed
    # communication inside them alike.
    "node_power_compute_w": "cluster.node.it_power_measured",
    "node_power_communication_w": "cluster.node.it_power_measured",
    # The phases in which no training kernel runs: the GPUs hold their memory and wait.
    "node_power_checkpoint_w": "cluster.node.power_checkpoint",
    "node_power_idle_w": "cluster.node.power_waiting",
    "node_power_recovery_w": "cluster.node.power_recovery",
    "catalog_wallclock_s": "training.wallclock",
    "catalog_availability": "training.cluster_availability",
}
# Weights exchanged at a cross-site synchronisation: every parameter at its training precision.
PARAMS_VARIABLE = "arch.params.total"
BYTES_PER_PARAM_VARIABLE = "precision.bytes_per_param"
OPTIONAL_FIELDS = frozenset({"node_power_compute_w", "node_power_communication_w", "node_power_checkpoint_w",
                             "node_power_idle_w", "node_power_recovery_w", "catalog_wallclock_s",
                             "catalog_availability", "job_mtbf_s", "job_links", "job_switches"})
COUNT_FIELDS = ("nodes", "gpus_per_node", "gpus")

# Failure classes: (name, rate variable, exposure per, count variable or None for one per exposure unit).
FAILURE_CLASSES: tuple[tuple[str, str, str, str | None], ...] = (
    ("gpu", "cluster.rel.gpu_die_failure_rate", "gpu", None),
    ("hbm", "cluster.rel.hbm_stack_failure_rate", "gpu", "mem.hbm.stacks_active"),
    ("nvlink", "cluster.rel.nvlink_failure_rate", "gpu", "link.nvlink.n_links"),
    ("host", "cluster.rel.host_base_failure_rate", "node", None),
    ("dimm", "cluster.rel.dimm_failure_rate", "node", "cluster.node.n_dimms"),
    ("drive", "cluster.rel.drive_failure_rate", "node", "cluster.node.n_drives"),
    ("psu", "cluster.rel.psu_failure_rate", "node", "cluster.node.n_psus"),
    ("nic_link", "cluster.rel.link_failure_rate", "link", None),
    ("switch", "cluster.rel.switch_failure_rate", "switch", None),
    ("software", "cluster.rel.job_software_failure_rate", "job", None),
)
# A preset may assign a per-GPU or per-node aggregate instead of its parts.
AGGREGATE_CLASSES: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "gpu_any": ("cluster.rel.gpu_failure_rate", "gpu", ("gpu", "hbm", "nvlink")),
    "host_any": ("cluster.rel.node_failure_rate", "node", ("host", "dimm", "drive", "psu")),
}
FLEET_CLASS = ("fleet_node", "cluster.rel.node_fleet_failure_rate", "node", None)


def failure_classes(values: Mapping[str, float], fleet: bool) -> tuple[tuple[FailureClass, ...], tuple[str, ...]]:
    """The failure classes with a resolved rate, and the names of those left out for want of one.

    `fleet` follows the catalog's choice for `cluster.rel.job_failure_rate`: the fleet-measured per-node
    rate already lumps every infrastructure part, so the component classes are then not added to it."""
    def make(name: str, var: str, per: str, count_var: str | None) -> FailureClass | None:
        if var not in values or (count_var is not None and count_var not in values):
            return None
        return FailureClass(name, var, values[var], per, 1.0 if count_var is None else values[count_var])

    if fleet:
        found = make(*FLEET_CLASS)
        if found is None:
            return (), (FLEET_CLASS[0],)
        return (found,), ()
    made = {spec[0]: make(*spec) for spec in FAILURE_CLASSES}
    for name, (var, per, parts) in AGGREGATE_CLASSES.items():
        if any(made[p] is None for p in parts) and var in values:
            for p in parts:
                made.pop(p)
            made[name] = make(name, var, per, None)
    return (tuple(c for c in made.values() if c is not None),
            tuple(sorted(n for n, c in made.items() if c is None)))
