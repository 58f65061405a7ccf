"""The virtual datacenter: exactness without failures, agreement with Daly's model, work conservation,
determinism, sites, and policies that cannot see the future."""

from __future__ import annotations

import dataclasses
import gc
import math

import numpy as np
import pytest
from datacenter_cases import HOUR, REPO, VALUES, binding, job, replay

from gpustack_compiler.base.errors import InputError
from gpustack_sim.datacenter import FailureClass, JobParameters, simulate
from gpustack_sim.datacenter.events import to_ns
from gpustack_sim.datacenter.policies import FixedInterval, Observation, SetCheckpointInterval, daly_interval
from gpustack_sim.datacenter.simulation import Replay
from gpustack_sim.datacenter.sites import load_sites, place


@pytest.fixture(scope="module")
def engine(real_engine):
    return real_engine


@pytest.fixture(scope="module")
def readme_parameters(engine) -> JobParameters:
    """The README run resolved from the catalog, with the availability assigned 1."""
    run = engine.load_run(REPO / "runs" / "llama70b_1024xh100.yaml").with_extras(
        assign={"training.cluster_availability": 1})
    return engine.job_parameters(run)[0]


def test_from_values_names_every_missing_variable():
    values = dict(VALUES)
    del values["training.t_step"], values["cluster.ckpt.t_load"]
    with pytest.raises(InputError, match="training.t_step, cluster.ckpt.t_load"):
        JobParameters.from_values(values, binding())
    assert {f for f, _, _ in binding().parameters} <= {f.name for f in dataclasses.fields(JobParameters)}


def test_negative_failure_rate_is_refused():
    bad = (FailureClass("gpu", "cluster.rel.gpu_die_failure_rate", -1e-9, "gpu", 1.0),)
    with pytest.raises(InputError, match="cluster.rel.gpu_die_failure_rate"):
        JobParameters.from_values(VALUES, binding(), bad)


def test_no_failures_wallclock_is_compute_plus_checkpoints_exactly():
    params = job(0.0)
    rep = replay(params)
    k = round(params.checkpoint_interval_s / params.step_time_s)
    n_ckpt = (params.total_steps - 1) // k
    assert rep.wallclock_ns == to_ns(params.token_budget / params.tokens_per_second) + n_ckpt * to_ns(120.0)
    assert rep.checkpoints_completed == n_ckpt and rep.interruptions == {}
    assert sum(rep.phase_ns.values()) == rep.wallclock_ns


def test_no_failures_matches_catalog_wallclock_at_availability_one(readme_parameters):
    """The catalog's availability folds in the checkpoint cost (Daly's tau/(tau+delta) without failures);
    at availability 1 there is none, which the replay reproduces with a zero blocking time."""
    params = dataclasses.replace(readme_parameters, failure_classes=(), checkpoint_blocking_s=0.0)
    assert params.catalog_availability == 1.0
    rep = replay(params)
    assert rep.wallclock_ns == to_ns(params.catalog_wallclock_s)
    assert rep.tokens == params.token_budget


def test_useful_time_agrees_with_daly_within_monte_carlo_error():
    """Daly's exact expectation for this model: a stretch of length L that must run uninterrupted, with
    restart R (failures during restart start it again), takes M e^(R/M) (e^(L/M) - 1) on average. The job
    is 149 segments of tau + delta and a last one of tau without a checkpoint."""
    params = job(1 / 6)
    result = simulate(params, policy="fixed", interval_s=1200.0, replications=1000, seed=7, log_replications=0)
    m, r, tau, delta = 6 * HOUR, params.restart_s, 1200.0, 120.0
    per = lambda length: m * math.exp(r / m) * (math.exp(length / m) - 1)  # noqa: E731
    expected = 149 * per(tau + delta) + per(tau)
    wall = result.figures["wallclock_s"]
    assert abs(wall.mean - expected) < 4 * wall.stderr, (wall.mean, expected, wall.stderr)
    # The first-order useful share 1 - delta/tau - (tau/2 + R)/M is close but not exact.
    first_order = 1 - delta / tau - (tau / 2 + r) / m
    assert abs(result.figures["useful_time_share"].mean - first_order) < 0.03


def test_work_is_conserved_and_the_budget_is_met_in_every_replication():
    classes = (FailureClass("gpu", "cluster.rel.gpu_die_failure_rate", 2e-4 / HOUR, "gpu", 1.0),
               FailureClass("host", "cluster.rel.host_base_failure_rate", 1e-3 / HOUR, "node", 1.0),
               FailureClass("software", "cluster.rel.job_software_failure_rate", 0.05 / HOUR, "job", 1.0))
    params = job(0.0, failure_classes=classes, checkpoint_blocking_s=1.0, checkpoint_write_s=400.0)
    for seed in range(40):
        rep = replay(params, seed=seed)
        assert rep.attempted_steps == rep.useful_steps + rep.lost_steps
        assert rep.useful_steps == params.total_steps and rep.tokens == params.token_budget
        assert sum(rep.phase_ns.values()) == rep.wallclock_ns
        assert rep.checkpoints_completed <= rep.checkpoints_started
    result = simulate(params, replications=40, seed=3)
    assert result.work["unbalanced_replications"] == 0
    assert result.tokens_min == result.tokens_max == params.token_budget


def test_same_seed_same_bytes_other_seed_differs(tmp_path):
    params = job(1.0)
    paths = []
    for name, seed in (("a", 5), ("b", 5), ("c", 6)):
        result = simulate(params, seed=seed, replications=3, log_replications=3)
        result.write_parquet(tmp_path / f"{name}.parquet")
        result.write_timeline_png(tmp_path / f"{name}.png")
        paths.append(name)
    read = lambda n, ext: (tmp_path / f"{n}.{ext}").read_bytes()  # noqa: E731
    assert read("a", "parquet") == read("b", "parquet") and read("a", "png") == read("b", "png")
    assert read("a", "parquet") != read("c", "parquet")


def test_replications_do_not_depend_on_count_or_chunks():
    # workers: test_distributed.py
    params = job(1.0)
    many = simulate(params, seed=1, replications=20, log_replications=0)  # three chunks
    assert simulate(params, seed=1, replications=3).failure_times_ns == many.failure_times_ns[:3]
    assert simulate(params, seed=1, replications=11).failure_times_ns == many.failure_times_ns[:11]


def test_days_horizon_stops_the_replay():
    params = job(1.0)
    result = simulate(params, days=1.0, to_budget=False, replications=2)
    assert result.figures["wallclock_s"].mean == 86400.0
    assert result.figures["tokens"].p95 < params.token_budget


class Recorder:
    """A policy that keeps what it is shown."""

    name = "recorder"

    def __init__(self):
        self.seen: list[Observation] = []

    def decide(self, obs):
        self.seen.append(obs)
        return FixedInterval(1200.0).decide(obs)


def _reachable(obj, depth=4):
    found, frontier = [], [obj]
    for _ in range(depth):
        frontier = [r for o in frontier for r in gc.get_referents(o) if not isinstance(r, type)]
        found += frontier
    return found


def test_a_policy_cannot_see_the_future():
    params = job(1.0)
    recorder = Recorder()
    rep = replay(params, policy=recorder, seed=11)
    assert recorder.seen and len(rep.failure_times_ns) > 3
    for obs in recorder.seen:
        assert all(f.time_s <= obs.elapsed_s for f in obs.failures)  # only failures that have happened
        assert len(obs.failures) == sum(1 for t in rep.failure_times_ns if t <= to_ns(obs.elapsed_s))
        for ref in _reachable(obs):
            assert not isinstance(ref, (Replay, np.random.Generator, np.random.SeedSequence))
    for f in dataclasses.fields(Observation):
        assert "rng" not in f.name and "next" not in f.name


def test_failure_times_do_not_depend_on_the_policy():
    params = job(1.0)
    fixed = simulate(params, policy="fixed", interval_s=600.0, seed=4, replications=3)
    daly = simulate(params, policy="daly", seed=4, replications=3)
    adaptive = simulate(params, policy="adaptive", seed=4, replications=3)
    for a, b, c in zip(fixed.failure_times_ns, daly.failure_times_ns, adaptive.failure_times_ns):
        n = min(len(a), len(b), len(c))  # the runs end at different times: compare while all three run
        assert n > 5 and a[:n] == b[:n] == c[:n]
    assert fixed.figures["wallclock_s"].mean != daly.figures["wallclock_s"].mean


def test_daly_interval_matches_the_catalog_example():
    # Daly 2006 (and the catalog relation's description): 117 min for M = 24 h, delta = 5 min.
    assert daly_interval(300.0, 24 * HOUR) / 60 == pytest.approx(117, abs=0.5)


def test_example_sites_place_the_job_under_the_power_caps(catalog_units):
    sites = load_sites(REPO / "sites" / "example_two_sites.yaml", catalog_units)
    assert [s.effective_accelerators for s in sites.sites] == [512, 512]
    params = job(0.0, nodes=128, gpus=1024)
    placement = place(sites, params.nodes, params.gpus_per_node, params.model_sync_bits)
    assert placement.placed == (("east", 64), ("west", 64)) and placement.spares == 8
    stall = to_ns(0.030 + params.model_sync_bits / 800e9)
    assert placement.sync_ns == stall
    plain, split = replay(params), replay(params, placement=placement)
    assert split.wallclock_ns - plain.wallclock_ns == stall * (params.total_steps // 100)


@pytest.mark.parametrize("edit, message", [
    (("power_cap: 650 kW", "power_cap: 900 kW"), r"example.yaml:\d+: sites\[0\].power_cap: '900 kW' is above cooling_limit"),
    (("base_power: 100 kW", "base_power: -5 kW"), r"example.yaml:\d+: sites\[0\].base_power: .* negative"),
    (("to: west", "to: north"), r"example.yaml:\d+: links\[0\].to: unknown site 'north'"),
    (("latency: 30 ms", "latency: 30 W"), r"example.yaml:\d+: links\[0\].latency: '30 W' is not a s quantity"),
    (("    spare_nodes: 4\n  - name: west", "    spare: 4\n  - name: west"), r"example.yaml:\d+: sites\[0\].spare: Extra"),
])
def test_bad_sites_name_file_line_and_field(tmp_path, edit, message, catalog_units):
    text = (REPO / "sites" / "example_two_sites.yaml").read_text()
    assert edit[0] in text
    path = tmp_path / "example.yaml"
    path.write_text(text.replace(edit[0], edit[1], 1))
    with pytest.raises(InputError, match=message) as info:
        load_sites(path, catalog_units)
    assert "\n" not in info.value.message


def test_calendar_fixed_first_then_earliest_fit():
    from gpustack_sim.datacenter.resources import Calendar

    cal = Calendar("storage", 10.0)
    cal.reserve_fixed(100, 200, 8.0, "maintenance")
    with pytest.raises(InputError, match="conflicts with maintenance"):
        cal.reserve_fixed(150, 250, 5.0, "drain")
    assert cal.place_flexible(50, 100, 5.0, "drain") == 200  # does not fit over the maintenance
    assert cal.place_flexible(0, 50, 5.0, "small drain") == 0  # fits before it
    assert cal.place_flexible(0, 100, 2.0, "light drain") == 0


def test_link_windows_book_the_down_time(tmp_path, catalog_units):
    from gpustack_sim.datacenter.resources import site_calendars

    path = tmp_path / "windows.yaml"
    path.write_text((REPO / "sites" / "example_two_sites.yaml").read_text()
                    + "    availability: [{start: 1 hour, end: 2 hour}]\n")
    cals = site_calendars(load_sites(path, catalog_units))
    link = cals["link east-west"]
    assert link.load_at(0) == link.capacity and link.load_at(to_ns(1.5 * HOUR)) == 0
    assert link.place_flexible(0, to_ns(60), 1.0, "sync") == to_ns(HOUR)


def test_engine_simulate_takes_layouts_from_run_files(engine):
    """The README run (tp 8, pp 4) may switch to tp 8, pp 8 with half the data parallelism: the same job
    on the same nodes. A policy switching at the start pays one restart, then runs at the other layout."""
    from gpustack_sim.datacenter.policies import SetLayout

    readme = REPO / "runs" / "llama70b_1024xh100.yaml"
    run, other = engine.load_run(readme), engine.load_run(readme, ["layout.pp=8", "layout.dp=16"])

    class SwitchAtStart:
        name = "switch"

        def decide(self, obs):
            return (SetCheckpointInterval(1800.0),) + ((SetLayout("pp8"),) if obs.elapsed_s == 0 else ())

    switched = engine.simulate(run, policy=SwitchAtStart(), layouts={"pp8": other}, days=1.0)
    restart = [r for r in switched.log if r["kind"] == "restart" and r["cause"]]
    assert [r["cause"] for r in restart] == ["layout pp8"]
    pp8 = engine.job_parameters(other)[0]
    assert pp8.step_time_s != switched.parameters.step_time_s
    assert restart[0]["duration_ns"] == to_ns(pp8.reinit_s) + to_ns(pp8.checkpoint_load_s)


def test_band_energy_is_the_variance_of_the_oscillations_inside_the_band():
    from gpustack_sim.datacenter.spectrum import band_energy

    t = np.arange(0, 3600, 0.1)
    inside, below, above = 50 * np.sin(2 * np.pi * 0.5 * t), 80 * np.sin(2 * np.pi * 0.02 * t), 30 * np.sin(
        2 * np.pi * 3.0 * t)
    # A sine of amplitude A carries A^2 / 2 of variance, all at its frequency.
    assert band_energy(1000 + inside + below + above, 0.1, (0.1, 2.0), 600.0) == pytest.approx(50 ** 2 / 2, rel=1e-3)
    assert band_energy(1000 + below + above, 0.1, (0.1, 2.0), 600.0) < 1e-3
    with pytest.raises(InputError, match="Nyquist"):
        band_energy(1000 + inside, 0.5, (0.1, 2.0), 600.0)
    with pytest.raises(InputError, match="undefined"):
        band_energy(np.array([1.0, np.nan] * 5000), 0.1, (0.1, 2.0), 600.0)
