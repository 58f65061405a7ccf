"""The serving replay (gpustack_sim/datacenter/serving): agreement with `estimate` on a steady load, the
replica's KV accounting and preemption, workload families, determinism, and bad input at the CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import fields
from pathlib import Path

import numpy as np
import pytest

from gpustack_compiler.base.errors import InputError
from gpustack_sim.datacenter.serving import Controller, FleetObservation, load_family, replica_parameters
from gpustack_sim.datacenter.serving.fleet import replay
from gpustack_sim.datacenter.serving.replica import PAGED, RESERVE

REPO = Path(__file__).resolve().parent.parent
SERVE_RUN = REPO / "runs" / "serve_llama70b_8xh100.yaml"
LENGTHS = {"input_tokens": {"mean": 1000, "max": 3072}, "output_tokens": {"mean": 300, "max": 1024}}


def gpustack(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-c", "from gpustack_sim.cli.main import main; main()", *args],
                          capture_output=True, text=True, env=env, cwd=cwd, timeout=300)


@pytest.fixture(scope="module")
def params(engine):
    # A chunk that holds two prompts: prefill then never limits the rate at which requests enter decode,
    # the regime in which the catalog's replica capacity (prefill FLOPs plus a share of full-batch decode
    # iterations) describes the engine.
    run = engine.load_run(SERVE_RUN, ["engine.chunk_tokens=2048"])
    p, _ = replica_parameters(engine.context, run)
    point = engine.resolver.resolve_many(["serve.throughput.output_per_gpu", "serve.replica.capacity", "serve.batch",
                                          "serve.batch.kv_limit"], engine.run_scenario(run))
    return p, {k: v.value for k, v in point.items()}


def test_saturated_replica_agrees_with_estimate_within_monte_carlo_error(params):
    """A replica fed faster than it serves, every request of the run's mean lengths, its KV reserved for
    the whole request as the catalog's batch limit assumes: its output rate is the estimate's capacity."""
    p, est = params
    assert est["serve.batch"] == est["serve.batch.kv_limit"]  # the batch the replay reaches is the KV limit
    family = load_family("steady")
    rates = []
    for seed in range(4):
        reqs = family.generate(2 * est["serve.replica.capacity"], 900, LENGTHS, None, 4096, np.random.default_rng(seed))
        run = replay([(p, 0)], reqs, 900, admission=RESERVE)
        rates.append(run.tokens[300:].sum() / 600 / p.gpus_per_replica)  # after five minutes' warm-up
    mean, se = np.mean(rates), np.std(rates, ddof=1) / np.sqrt(len(rates))
    target = est["serve.throughput.output_per_gpu"]
    # Monte Carlo error of the replay's mean, plus the granularity of whole iterations in the window.
    assert abs(mean - target) <= 3 * se + 0.002 * target, (mean, se, target)


def test_chunk_of_one_prompt_limits_the_replica_below_the_catalog_capacity(engine):
    """With 512-token chunks and 1,000-token prompts, at most one chunk per iteration caps the requests
    entering decode (0.512 per iteration) below the catalog's capacity: the replay says so, by 4%."""
    run = engine.load_run(SERVE_RUN)
    p, _ = replica_parameters(engine.context, run)
    est = engine.resolver.resolve_many(["serve.throughput.output_per_gpu", "serve.replica.capacity"],
                                       engine.run_scenario(run))
    reqs = load_family("steady").generate(2 * est["serve.replica.capacity"].value, 600, LENGTHS, None, 4096,
                                          np.random.default_rng(0))
    fleet = replay([(p, 0)], reqs, 600, admission=RESERVE)
    rate = fleet.tokens[200:].sum() / 400 / p.gpus_per_replica
    assert 0.93 < rate / est["serve.throughput.output_per_gpu"].value < 0.98


def test_paged_admission_preempts_and_every_request_finishes(params):
    """Paged admission takes requests on their prompts alone; when the cache fills, the newest decoding
    request is preempted and recomputed, and still finishes with all its tokens."""
    p, _ = params
    from dataclasses import replace

    small = replace(p, kv_capacity_tokens=20000.0)
    reqs = load_family("poisson").generate(3.0, 120, LENGTHS, None, 4096, np.random.default_rng(1))
    run = replay([(small, 0)], reqs, 3600, admission=PAGED)
    assert run.log.preemptions.sum() > 0
    assert not np.isnan(run.log.finish_s).any()
    # A preempted request's generated tokens become prompt: every output token is generated once.
    assert run.tokens.sum() == reqs.output_tokens.sum()
    assert np.all(run.log.first_token_s >= reqs.arrival_s)
    assert np.all(run.log.finish_s >= run.log.first_token_s)
    assert run.kv_share.max() <= 1.0 + 1e-9


def test_reserve_admission_never_exceeds_the_cache(params):
    p, _ = params
    reqs = load_family("poisson").generate(20.0, 120, LENGTHS, None, 4096, np.random.default_rng(2))
    run = replay([(p, 0)], reqs, 600, admission=RESERVE)
    assert run.log.preemptions.sum() == 0
    assert run.kv_share.max() <= 1.0 + 1e-9


def test_azure_families_reproduce_their_traces_lengths_and_rate():
    conv = load_family("azure_conv_2023")
    reqs = conv.generate(conv.arrivals["mean_rate_per_s"], 3600, LENGTHS, None, 10**6, np.random.default_rng(0))
    assert len(reqs) / 3600 == pytest.approx(conv.arrivals["mean_rate_per_s"], rel=0.05)
    assert reqs.input_tokens.mean() == pytest.approx(conv.input_tokens["mean"], rel=0.05)
    assert reqs.output_tokens.mean() == pytest.approx(conv.output_tokens["mean"], rel=0.05)
    assert conv.source["licence"] == "CC-BY 4.0"


def test_bursty_gaps_vary_more_than_poisson():
    def cv(name):
        t = load_family(name).generate(50.0, 600, LENGTHS, None, 4096, np.random.default_rng(0)).arrival_s
        g = np.diff(t)
        return g.std() / g.mean()

    assert cv("poisson") == pytest.approx(1.0, abs=0.05)
    assert cv("bursty") > 3.0


def test_the_controller_sees_numbers_only():
    """The Observation rule: a controller's snapshot holds plain numbers and tuples, nothing to reach the
    simulator or the future requests through."""
    obs = FleetObservation(0.0, (1, 2), (0.1, 0.2), (0, 0), (True, True), (1.0,), (1.0,), (), (700.0,))
    for f in fields(obs):
        value = getattr(obs, f.name)
        items = value if isinstance(value, tuple) else (value,)
        flat = [x for item in items for x in (item if isinstance(item, tuple) else (item,))]
        assert all(isinstance(x, (int, float, bool)) for x in flat), f.name
    assert Controller(migrate=True).decide(obs) == []  # one light replica: nothing to move


def test_unknown_family_names_the_families():
    with pytest.raises(InputError, match="unknown workload family 'nope'"):
        load_family("nope")


def test_cli_replay_writes_log_and_plot_and_is_deterministic(tmp_path):
    args = ("simulate", str(SERVE_RUN), "--arrivals", "azure_code_2023", "--hours", "0.05", "--replications", "2",
            "--seed", "5", "--json")
    a = gpustack(*args, "--out", str(tmp_path / "a"))
    b = gpustack(*args, "--out", str(tmp_path / "b"))
    assert a.returncode == 0, a.stderr
    assert a.stdout == b.stdout
    data = json.loads(a.stdout)
    assert 0 <= data["figures"]["slo_attainment"]["mean"] <= 1
    assert data["figures"]["tokens_served"]["mean"] > 0
    assert {p.name for p in (tmp_path / "a").iterdir()} == {"result.json", "requests.parquet", "serving.png"}
    for name in ("requests.parquet", "serving.png", "result.json"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name


@pytest.mark.parametrize("case", ["negative_rate", "unknown_family", "zero_slo", "ragged_trace", "zero_hours"])
def test_cli_bad_input_is_one_line_exit_2_nothing_written(tmp_path, case):
    out = tmp_path / "out"
    args = ["simulate", str(SERVE_RUN), "--arrivals", "poisson", "--hours", "0.01", "--out", str(out)]
    expect = ""
    if case == "negative_rate":
        args += ["--rate", "-3"]
        expect = "--rate"
    elif case == "unknown_family":
        args[3] = "no_such_family"
        expect = "no_such_family"
    elif case == "zero_slo":
        bad = tmp_path / "zero_slo.yaml"
        bad.write_text(SERVE_RUN.read_text().replace("ttft_p99_ms: 2000", "ttft_p99_ms: 0"))
        args[1] = str(bad)
        expect = "ttft_p99_ms"
    elif case == "ragged_trace":
        trace = tmp_path / "trace.csv"
        trace.write_text("time_s,input_tokens,output_tokens\n0.0,100,20\n0.5,200\n")
        args[3] = str(trace)
        expect = "line 3"
    else:
        args[5] = "0"
        expect = "--hours"
    proc = gpustack(*args)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and expect in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr
    assert not out.exists()
