"""The Dask backend: sweeps, Monte Carlo, simulation replications and experiment panels give the same
result on this process, one local worker and two, because work is cut into chunks whose boundaries and
seeds depend on the run alone. One pair of local clusters serves the whole module (each costs seconds)."""

from __future__ import annotations

import json
import pickle
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from helpers import FIXTURE, REPO, Engine, run_cli_here

from gpustack_sim.analyses import sweep as sweep_module
from gpustack_sim.analyses import uncertainty
from gpustack_sim.datacenter import api as datacenter_api
from gpustack_sim.distributed import Backend, chunk_ranges, chunk_seed
from gpustack_sim.distributed.chunks import TASKS_PER_THREAD
from gpustack_sim.experiments import Workspace, run_protocol

distributed = pytest.importorskip("distributed")

RUN = REPO / "runs" / "llama70b_1024xh100.yaml"
GRID = {"tp": [1, 2, 4, 8], "pp": [1, 2, 4, 8, 16], "dp": [8, 16, 32, 64, 128, 256], "micro_batch": [1, 2, 4],
        "recompute": ["none", "selective", "full"]}


@pytest.fixture(scope="module")
def clients():
    """Clients of a local cluster with one worker process and of one with two."""
    from distributed import Client, LocalCluster

    opened = {}
    try:
        for n in (1, 2):
            cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True, dashboard_address=":0")
            opened[n] = (cluster, Client(cluster, set_as_default=False))
        yield {n: c for n, (_, c) in opened.items()}
    finally:
        for cluster, client in opened.values():
            client.close()
            cluster.close()


def _same_everywhere(clients, compute):
    """compute(client) on no cluster, one worker and two: the three results, which must be equal."""
    results = [compute(None), compute(clients[1]), compute(clients[2])]
    assert results[0] == results[1] == results[2]
    return results[0]


def test_chunks_and_their_seeds_depend_on_the_run_alone():
    assert chunk_ranges(10, 4) == [(0, 4), (4, 8), (8, 10)] and chunk_ranges(0, 4) == []
    # chunk 0 draws as an unchunked run did; other chunks draw their own streams
    assert np.random.PCG64(chunk_seed(7, 0)).random_raw() == np.random.PCG64(7).random_raw()
    firsts = {np.random.PCG64(chunk_seed(7, k)).random_raw() for k in range(50)}
    assert len(firsts) == 50


def test_backend_keeps_chunk_order_and_counts_progress(clients):
    ticks = []
    out = Backend(clients[2]).map(_square_all, 3, [[1, 2], [3], [4, 5, 6]], lambda d, t: ticks.append((d, t)))
    assert out == [[3, 12], [27], [48, 75, 108]]
    assert ticks[0] == (0, 3) and ticks[-1] == (3, 3) and len(ticks) == 4


def test_backend_sends_a_few_runs_of_chunks_per_worker_as_one_task_each(clients):
    # 2 single-threaded workers: at most 2 x TASKS_PER_THREAD tasks for 1000 chunks, results in chunk order
    ticks = []
    chunks = [[k] for k in range(1000)]
    out = Backend(clients[2]).map(_square_all, 1, chunks, lambda d, t: ticks.append((d, t)))
    assert out == [[k * k] for k in range(1000)]
    assert ticks[0] == (0, 1000) and ticks[-1] == (1000, 1000) and 2 <= len(ticks) <= 1 + 2 * TASKS_PER_THREAD
    assert [d for d, _ in ticks] == sorted(d for d, _ in ticks)


def _square_all(factor: int, chunk: list[int]) -> list[int]:
    return [factor * x * x for x in chunk]


def test_sweep_is_the_same_on_any_number_of_workers(real_engine: Engine, clients, monkeypatch):
    monkeypatch.setattr(sweep_module, "CHUNK", 97)  # many chunks, a short last one
    run = real_engine.load_run(RUN)
    reference = real_engine.sweep(run, GRID, "tokens_per_sec", 7).to_dict()

    def compute(client):
        return json.dumps(real_engine.sweep(run, GRID, "tokens_per_sec", 7, client=client).to_dict(), sort_keys=True)

    shown = json.loads(_same_everywhere(clients, compute))
    assert shown == reference and shown["grid_points"] == 4 * 5 * 6 * 3 * 3 and shown["valid"] > 7
    # the chunked ranking is the ranking of the whole grid at once
    monkeypatch.setattr(sweep_module, "CHUNK", 1 << 20)
    whole = real_engine.sweep(run, GRID, "tokens_per_sec", 7).to_dict()
    assert whole == shown
    assert [r["tokens_per_sec"] for r in shown["top"]] == sorted((r["tokens_per_sec"] for r in shown["top"]),
                                                                  reverse=True)


def test_monte_carlo_is_the_same_on_any_number_of_workers(real_engine: Engine, clients, monkeypatch):
    monkeypatch.setattr(uncertainty, "SAMPLE_CHUNK", 1000)
    scenario = real_engine.scenarios.build([FIXTURE])
    dist = real_engine.distribution("econ.job.capex_rate~uniform(10 USD/s, 30 USD/s)")

    def compute(client):
        return real_engine.sample("econ.cost.per_token", scenario, [dist], 4500, seed=3, client=client).to_dict()

    summary = _same_everywhere(clients, compute)
    assert summary["samples"] == 4500 and summary["p5"] < summary["p50"] < summary["p95"]
    # chunks draw different streams: a chunked run is not one stream cut up
    monkeypatch.setattr(uncertainty, "SAMPLE_CHUNK", 100_000)
    assert real_engine.sample("econ.cost.per_token", scenario, [dist], 4500, seed=3).to_dict() != summary


def test_estimate_intervals_are_the_same_on_any_number_of_workers(real_engine: Engine, clients, monkeypatch):
    monkeypatch.setattr(uncertainty, "SAMPLE_CHUNK", 700)
    run = real_engine.load_run(RUN)
    estimate = _same_everywhere(clients, lambda client: real_engine.estimate(run, 2000, 5, client=client).to_dict())
    assert any("p5" in f and f["p5"] < f["p95"] for f in estimate["figures"])


def test_a_sampler_sent_to_a_worker_computes_bit_for_bit_the_same(real_engine: Engine, monkeypatch):
    # Unpickling a sympy tree re-evaluates it (a number distributed over a sum), which reorders floating-point
    # operations; the sampler must arrive as it left.
    import cloudpickle

    samplers = []
    run_chunks = uncertainty.Sampler.run

    def keep(self, n, backend=None, progress=None):
        samplers.append(self)
        return run_chunks(self, n, backend, progress)

    monkeypatch.setattr(uncertainty.Sampler, "run", keep)
    real_engine.estimate(real_engine.load_run(RUN), 500, 5)
    assert samplers
    for sampler in samplers:
        here = sampler.chunk(0, 500)
        there = cloudpickle.loads(cloudpickle.dumps(sampler)).chunk(0, 500)
        assert here.keys() == there.keys()
        for target in here:
            np.testing.assert_array_equal(here[target], there[target], err_msg=target)


def test_a_symbolic_value_arrives_unevaluated_as_it_left():
    # Unpickled evaluated, Min(1.2, 1, x) would fold to Min(1, x) and a sum could reorder: a sampler carries its
    # programs this way, so a worker compiles the same expression as this process.
    import cloudpickle
    import sympy

    x = sympy.Symbol("x")
    tree = sympy.Min(sympy.Float(1.2), 1, x, evaluate=False)
    assert pickle.loads(pickle.dumps(tree)) != tree  # what plain unpickling does
    there = cloudpickle.loads(cloudpickle.dumps(uncertainty.Symbolic(tree, {"stage": tree})))
    assert sympy.srepr(there.symbolic) == sympy.srepr(tree) and sympy.srepr(there.stages["stage"]) == sympy.srepr(tree)


def test_simulate_replications_are_the_same_on_any_number_of_workers(real_engine: Engine, clients):
    run = real_engine.load_run(RUN)
    params = real_engine.job_parameters(run)[0]
    n = datacenter_api.REPLICATION_CHUNK * 2 + 3

    def compute(client):
        result = real_engine.simulate(run, seed=4, replications=n, days=2.0, client=client, parameters=params)
        return json.dumps(result.to_dict(), sort_keys=True, default=str)

    shown = json.loads(_same_everywhere(clients, compute))
    assert shown["replications"] == n


def test_experiment_run_is_the_same_on_any_number_of_workers(tmp_path: Path, clients):
    from gpustack_sim import Engine as PlainEngine

    engine = PlainEngine.open(REPO / "catalog", REPO / "build")
    d = tmp_path / "experiments"
    (d / "protocols").mkdir(parents=True)
    shutil.copy(REPO / "experiments" / "protocols" / "E001.yaml", d / "protocols" / "E001.yaml")
    shutil.copy(REPO / "experiments" / "protocols.lock", d / "protocols.lock")
    ws = Workspace(d, REPO)

    def compute(client):
        result = run_protocol("E001", workspace=ws, engine_factory=lambda: engine, replications=6, seed=7,
                              client=client, write=False)
        return result.artifact.artifact_sha256

    _same_everywhere(clients, compute)


def test_cli_sweep_on_a_scheduler_or_local_workers_matches_this_process(clients):
    grid = ["--grid", "tp=1,2,4,8", "--grid", "pp=1,2,4,8", "--grid", "micro_batch=1,2,4"]
    here = run_cli_here("sweep", str(RUN), *grid, "--json")
    assert here.returncode == 0 and json.loads(here.stdout)["grid_points"] == 48
    for option in (["--scheduler", clients[2].scheduler.address], ["--workers", "2"]):
        there = run_cli_here("sweep", str(RUN), *grid, "--json", *option)
        assert there.returncode == 0, there.stderr
        assert there.stdout == here.stdout  # byte for byte: the wall time goes to stderr
        # the wall time alone: no progress bar off a terminal
        assert re.fullmatch(r"swept 26 layouts in [0-9.]+ s \([0-9.]+ s evaluating the model: [0-9,]+ evaluations/s\)\n",
                            there.stderr), there.stderr


def test_cli_refuses_workers_with_a_scheduler():
    res = run_cli_here("sweep", str(RUN), "--grid", "tp=1,2", "--workers", "2", "--scheduler", "tcp://127.0.0.1:1")
    assert res.returncode == 2 and "exclude each other" in res.stderr and "Traceback" not in res.stderr
