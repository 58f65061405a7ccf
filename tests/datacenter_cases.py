"""A small synthetic job and a replay helper shared by the datacenter tests (test values, not catalog data)."""

from __future__ import annotations

import dataclasses
import functools

import numpy as np
from helpers import REPO  # noqa: F401  (the datacenter tests take it from here)

from gpustack_compiler.build import pipeline
from gpustack_compiler.manifest.records import Tables
from gpustack_sim.datacenter import FailureClass, JobParameters
from gpustack_sim.datacenter.policies import FixedInterval
from gpustack_sim.datacenter.simulation import Replay
from gpustack_sim.datacenter.sites import single_site
from gpustack_sim.engine.facts import Facts, TrainingReplay

HOUR = 3600.0

# A small synthetic job (test values, not catalog data): 60 s steps, synchronous checkpoints.
VALUES = {"training.t_step": 60.0, "training.t_exposed_comm": 6.0, "arch.tokens_per_step": 1000.0,
          "training.tokens_per_sec": 1000.0 / 60.0, "training.total_tokens": 3.0e6, "cluster.ckpt.size": 8e12,
          "cluster.ckpt.t_blocking": 120.0, "cluster.ckpt.t_write": 120.0, "cluster.ckpt.t_load": 100.0,
          "cluster.ckpt.interval": 1200.0, "cluster.rel.t_detect": 200.0, "cluster.rel.t_reinit": 300.0,
          "cluster.sched.t_requeue": 0.0, "cluster.job.n_nodes": 16.0, "cluster.node.n_gpus": 8.0,
          "par.n_gpus": 128.0, "cluster.rel.job_mtbf": 6 * HOUR, "cluster.node.it_power_measured": 8000.0,
          "arch.params.total": 1e9, "precision.bytes_per_param": 16.0}


@functools.cache
def binding() -> TrainingReplay:
    """The training replay's bindings in the repository's catalog (which VALUES's keys must be)."""
    manifest = pipeline.run(REPO / "catalog", None, write_manifest=False, use_cache=False).manifest
    return Facts(Tables.parse(manifest)).training_replay


def job(rate_per_hour: float = 1 / 6, **changes) -> JobParameters:
    classes = (FailureClass("software", "cluster.rel.job_software_failure_rate", rate_per_hour / HOUR, "job", 1.0),)
    return dataclasses.replace(JobParameters.from_values(VALUES, binding(), classes), **changes)


def replay(params, policy=None, seed=0, horizon_ns=None, placement=None):
    policy = policy or FixedInterval(params.checkpoint_interval_s)
    placement = placement or single_site(params.nodes)
    return Replay(params, placement, policy, np.random.SeedSequence(seed), horizon_ns, True).run()
