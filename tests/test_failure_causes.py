"""Interruptions by cause: per-component rates from Llama 3's Table 5 (reliability_llama3_2024.yaml), and the
rates' own uncertainty drawn per replication so the band holds it beside the Poisson noise."""

from __future__ import annotations

import dataclasses

import pytest
from helpers import REPO

from gpustack_sim import Engine
from gpustack_sim.datacenter.api import simulate
from gpustack_sim.engine.run_file import load_training_run

RUN = REPO / "runs" / "llama3_405b_16384xh100.yaml"
HOURS = 54 * 24


@pytest.fixture(scope="module")
def params(engine: Engine):
    return engine.job_parameters(load_training_run(RUN))[0]


def test_the_rates_give_back_table_5s_419_interruptions_by_cause(params) -> None:
    per_class = {c.name: c.rate_s(params.nodes, params.gpus_per_node, params.job_links, params.job_switches)
                 * HOURS * 3600 for c in params.failure_classes}
    # Table 5: GPU 196 (faulty GPU, SRAM, system processor, SDC, thermal), HBM3 72, host 38, NIC and
    # switch/cable 42, software 63 (bugs, dependency, NCCL watchdog), SSD 3, power supply 3, system memory 2.
    expected = {"gpu": 196, "hbm": 72, "host": 38, "nic_link": 42, "software": 63, "drive": 3, "psu": 3, "dimm": 2,
                "nvlink": 0, "switch": 0}
    assert per_class == pytest.approx(expected, rel=2e-3, abs=1e-9)
    assert sum(per_class.values()) == pytest.approx(419, rel=1e-3)
    # Each rate carries its count's Poisson sd: sqrt(n) / exposure, relative 1 / sqrt(n).
    gpu = next(c for c in params.failure_classes if c.name == "gpu")
    assert gpu.rate_sd_per_unit_s / gpu.rate_per_unit_s == pytest.approx(196 ** -0.5, rel=2e-3)


def test_the_band_over_replications_holds_the_rates_uncertainty(params) -> None:
    certain = dataclasses.replace(params, failure_classes=tuple(
        dataclasses.replace(c, rate_sd_per_unit_s=0.0) for c in params.failure_classes))
    spread = {}
    for name, p in (("with", params), ("without", certain)):
        result = simulate(p, seed=3, replications=60, days=54)
        stat = result.figures["interruptions"]
        assert stat.mean == pytest.approx(419, rel=0.08)
        spread[name] = stat.p95 - stat.p5
    # Poisson alone: var = 419; with each class's rate drawn, var doubles (each class adds its count).
    assert spread["with"] > 1.25 * spread["without"]


def test_same_seed_same_draws(params) -> None:
    a = simulate(params, seed=5, replications=3, days=5).to_dict()
    b = simulate(params, seed=5, replications=3, days=5).to_dict()
    assert a == b
