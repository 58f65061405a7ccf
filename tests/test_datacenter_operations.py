"""The virtual datacenter's operations: the power series and its integral, grid and cooling signals, WAN
link windows inside the replay, and the power-cap, migration and layout interventions. Each expected
figure is worked out by hand from the synthetic job of test_datacenter (60 s steps, a 120 s blocking
checkpoint every 20 steps, 8 kW nodes)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from datacenter_cases import REPO, job, replay

from gpustack_compiler.base.errors import InputError
from gpustack_sim.datacenter import simulate
from gpustack_sim.datacenter.events import to_ns
from gpustack_sim.datacenter.policies import FixedInterval, Migrate, SetCheckpointInterval, SetLayout, SetPowerCap
from gpustack_sim.datacenter.sites import Placement, load_sites, place

EXAMPLE = (REPO / "sites" / "example_two_sites.yaml").read_text()
NODE_W = 8000.0  # the synthetic job's node power (test_datacenter.VALUES)


def sites_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "sites.yaml"
    path.write_text(text)
    return path


class Once:
    """A policy that applies `actions` at the first epoch where `when(obs)` holds, the interval always."""

    name = "once"

    def __init__(self, actions, when=lambda obs: obs.elapsed_s == 0):
        self.actions, self.when, self.done, self.seen = tuple(actions), when, False, []

    def decide(self, obs):
        self.seen.append(obs)
        out = FixedInterval(1200.0).decide(obs)
        if not self.done and self.when(obs):
            self.done = True
            out += self.actions
        return out


def test_power_series_integrates_to_the_energy_per_site_and_is_undefined_without_a_power(catalog_units):
    sites = load_sites(REPO / "sites" / "example_two_sites.yaml", catalog_units)
    params = job(1.0, nodes=128, gpus=1024)
    result = simulate(params, sites=sites, seed=2, replications=1, policy="fixed", interval_s=1200.0)
    assert result.replications == 1 and result.figures["interruptions"].mean > 3
    total = 0.0
    for site in ("east", "west"):
        series = result.power_series(site, 300.0)
        assert series.energy_j() == pytest.approx(result.energy_by_site_j[site].mean, rel=1e-12)
        total += series.energy_j()
        # This job has no node power outside the steps: undefined (NaN) exactly where those phases ran.
        assert series.undefined == ("checkpoint", "recovery")
        for ph in series.undefined:
            assert np.array_equal(np.isnan(series.power_w[ph]), series.node_s[ph] > 0)
        assert np.isnan(series.total_w).any() and not np.isnan(series.power_w["compute"]).any()
        # Node-time adds up to the replay's: every bin holds at most its width times the site's nodes.
        assert sum(series.node_s[ph].sum() for ph in series.node_s) == pytest.approx(
            64 * result.figures["wallclock_s"].mean, rel=1e-12)
    assert total == pytest.approx(result.figures["energy_j"].mean, rel=1e-12)
    # A window is the same series cut: its bins are those of the whole run.
    whole, part = result.power_series("east", 300.0), result.power_series("east", 300.0, window=(3000.0, 6000.0))
    assert np.array_equal(part.power_w["compute"], whole.power_w["compute"][10:20])


def test_a_power_series_needs_a_known_site_and_a_logged_replication():
    result = simulate(job(1.0), seed=1, replications=2, log_replications=1)
    with pytest.raises(InputError, match="no site 'north'"):
        result.power_series("north", 60.0)
    with pytest.raises(InputError, match="replication 1 was not logged"):
        result.power_series("site", 60.0, replication=1)
    with pytest.raises(InputError, match="resolution"):
        result.power_series("site", 0.0)


# One site of 16 nodes (128 accelerators at 1 kW over a 100 kW base) under a 250 kW cap.
ONE_SITE = """description: test site (values chosen for the test)
sites:
  - name: east
    accelerator: gpu_h100_sxm
    accelerators: 128
    accelerator_power: 1 kW
    base_power: 100 kW
    cooling_limit: 300 kW
    grid_limit: 300 kW
    power_cap: 250 kW
    storage_bandwidth: 100 GB/s
"""


def test_a_grid_curtailment_halves_the_site_and_lengthens_the_run_by_the_lost_work(tmp_path, catalog_units):
    """The window [3600 s, 4800 s) leaves 164 kW: 64 accelerators, 8 nodes of 16. At 3600 s the job is at
    step 56 (two 1320 s cycles of 20 steps and a checkpoint, then 16 steps); the window holds the checkpoint
    at step 60 (120 s) and 1080 s of steps at half speed, so the job falls 540 s behind."""
    signal = "    signals: [{kind: grid, start: 1 hour, duration: 1200 s, limit: 164 kW}]\n"
    sites = load_sites(sites_file(tmp_path, ONE_SITE + signal), catalog_units)
    params = job(0.0)
    result = simulate(params, sites=sites, policy="fixed", interval_s=1200.0)
    assert to_ns(result.figures["wallclock_s"].mean) - replay(params).wallclock_ns == to_ns(540.0)
    assert result.figures["interruptions"].mean == 0 and result.work["lost_steps"] == 0
    rows = [r for r in result.log if r["kind"] in ("grid_signal", "membership_change")]
    assert [(r["kind"], r["time_ns"], r["count"], r["nodes"], r["site"]) for r in rows] == [
        ("grid_signal", to_ns(3600.0), 0, 16, "east"), ("membership_change", to_ns(3600.0), -8, 8, "east"),
        ("grid_signal", to_ns(4800.0), 0, 8, "east"), ("membership_change", to_ns(4800.0), 8, 16, "east")]
    # Power by 60 s bin: 16 nodes before, 8 during the window (outside its checkpoint), 16 after.
    series = result.power_series("east", 60.0)
    running = series.power_w["compute"] + series.power_w["communication"]
    minute = lambda s: int(s // 60)  # noqa: E731
    assert running[minute(3000.0)] == pytest.approx(16 * NODE_W)
    assert running[minute(3600.0)] == pytest.approx(8 * NODE_W)
    assert running[minute(4500.0)] == pytest.approx(8 * NODE_W)
    assert running[minute(4800.0)] == pytest.approx(16 * NODE_W)
    assert series.energy_j() == pytest.approx(result.figures["energy_j"].mean, rel=1e-12)


def test_overlapping_signals_of_one_kind_are_a_conflict(tmp_path, catalog_units):
    signals = ("    signals:\n      - {kind: cooling, start: 1 hour, duration: 2 hour, limit: 200 kW}\n"
               "      - {kind: cooling, start: 2 hour, duration: 1 hour, limit: 180 kW}\n"
               "      - {kind: grid, start: 2 hour, duration: 1 hour, limit: 180 kW}\n")
    with pytest.raises(InputError, match=r"sites.yaml:\d+: sites\[0\]\.signals: .*signals.1 conflicts with signals.0"):
        load_sites(sites_file(tmp_path, ONE_SITE + signals), catalog_units)
    with pytest.raises(InputError, match=r"sites.yaml:\d+: sites\[0\]\.signals\[0\]\.duration: must be positive"):
        load_sites(sites_file(tmp_path, ONE_SITE + "    signals: [{kind: grid, start: 1 hour, duration: 0 s, "
                              "limit: 1 kW}]\n"), catalog_units)


def test_a_synchronisation_in_a_link_down_window_waits_for_the_link(tmp_path, catalog_units):
    """Step 100's compute ends at 6000 s of steps + 4 checkpoints of 120 s = 6480 s, where the first
    cross-site synchronisation starts; the link is down over [6400 s, 7000 s), so it waits 520 s."""
    params = job(0.0, nodes=128, gpus=1024)
    windows = "    availability: [{start: 0 s, end: 6400 s}, {start: 7000 s, end: 1000 hour}]\n"
    sites = load_sites(sites_file(tmp_path, EXAMPLE + windows), catalog_units)
    placement = place(sites, params.nodes, params.gpus_per_node, params.model_sync_bits)
    up = dataclasses.replace(placement, sites=load_sites(REPO / "sites" / "example_two_sites.yaml", catalog_units))
    waited, plain = replay(params, placement=placement), replay(params, placement=up)
    assert waited.wallclock_ns - plain.wallclock_ns == to_ns(520.0)
    assert waited.interruptions == {} and waited.useful_steps == params.total_steps
    delayed = [r for r in waited.log if r["kind"] == "state_transfer" and r["cause"]]
    assert [(r["time_ns"], r["duration_ns"], r["position"], r["cause"]) for r in delayed] == [
        (to_ns(6480.0), to_ns(520.0) + placement.sync_ns, 100, "waited for link east-west")]


def test_a_policy_power_cap_shrinks_the_site_and_membership_follows(catalog_units):
    """East capped at 356 kW feeds 256 accelerators (32 nodes): the job trains on 96 of its 128 nodes."""
    sites = load_sites(REPO / "sites" / "example_two_sites.yaml", catalog_units)
    params = job(0.0, nodes=128, gpus=1024)
    placement = place(sites, params.nodes, params.gpus_per_node, params.model_sync_bits)
    policy = Once([SetPowerCap("east", 356e3)])
    rep = replay(params, policy=policy, placement=placement)
    k = round(1200.0 / 60.0)
    expected = (to_ns(params.token_budget / (params.tokens_per_second * 96 / 128))
                + (params.total_steps - 1) // k * to_ns(120.0) + params.total_steps // 100 * placement.sync_ns)
    assert rep.wallclock_ns == expected
    assert [(r["count"], r["site"]) for r in rep.log if r["kind"] == "membership_change"] == [(-32, "east")]
    assert rep.energy_j["east"]["compute"] == pytest.approx(rep.energy_j["west"]["compute"] / 2)
    with pytest.raises(InputError, match="power cap .* outside 0 to its cooling and grid limits"):
        replay(params, policy=Once([SetPowerCap("east", 750e3)]), placement=placement)


def test_a_migration_moves_nodes_over_the_wan_and_they_idle_until_the_state_arrives(catalog_units):
    """64 nodes start at east; 32 move to west at the start. The state (8e12 bit over 800 Gbit/s + 30 ms)
    takes 10.03 s, during which east trains alone on 32 nodes (its step under way is then redone) and
    the 32 at west idle; from then on the job is the 32 + 32 split, synchronising over the link."""
    sites = load_sites(REPO / "sites" / "example_two_sites.yaml", catalog_units)
    params = job(0.0, nodes=64, gpus=512)
    placement = place(sites, params.nodes, params.gpus_per_node, params.model_sync_bits)
    assert placement.placed == (("east", 64),)
    result = simulate(params, sites=sites, policy=Once([Migrate("east", "west", 32)]))
    transfer = to_ns(8e12 / 800e9 + 0.030)
    split = Placement((("east", 32), ("west", 32)), placement.spares, 100, to_ns(0.030 + params.model_sync_bits / 800e9),
                      sites)
    assert to_ns(result.figures["wallclock_s"].mean) == transfer + replay(params, placement=split).wallclock_ns
    moved = [r for r in result.log if r["kind"] == "state_transfer" and r["cause"].startswith("migration")]
    assert [(r["time_ns"], r["duration_ns"], r["count"], r["site"]) for r in moved] == [(0, transfer, 32, "west")]
    west = result.power_series("west", 60.0)
    assert west.node_s["idle"].sum() == pytest.approx(32 * transfer / 1e9)
    assert np.isnan(west.total_w[0]) and "idle" in west.undefined
    powered = simulate(job(0.0, nodes=64, gpus=512, node_power_idle_w=3000.0), sites=sites,
                       policy=Once([Migrate("east", "west", 32)])).power_series("west", 60.0)
    assert "idle" not in powered.undefined and powered.power_w["idle"][0] == pytest.approx(
        3000.0 * 32 * transfer / 1e9 / 60.0)
    with pytest.raises(InputError, match="needs a positive count and a link"):
        simulate(params, sites=sites, policy=Once([Migrate("east", "east", 4)]))


def test_every_phase_with_a_node_power_makes_a_defined_series_whose_energy_counts_it(catalog_units):
    """Checkpoint snapshots, recoveries and steps each at their node power: no NaN, nothing excluded for
    want of a phase power, and the energy is the series' integral, phase by phase."""
    sites = load_sites(REPO / "sites" / "example_two_sites.yaml", catalog_units)
    powers = {"node_power_checkpoint_w": 3000.0, "node_power_idle_w": 3000.0, "node_power_recovery_w": 2500.0}
    params = job(1.0, nodes=128, gpus=1024, **powers)
    result = simulate(params, sites=sites, seed=2, replications=1, policy="fixed", interval_s=1200.0)
    assert not any("no catalog node power" in e for e in result.excluded)
    assert any("serialises and writes checkpoint shards" in e for e in result.excluded)
    series = result.power_series("east", 60.0)
    assert series.undefined == () and not np.isnan(series.total_w).any()
    assert series.energy_j() == pytest.approx(result.energy_by_site_j["east"].mean, rel=1e-12)
    for phase, watts in (("checkpoint", 3000.0), ("recovery", 2500.0), ("compute", 8000.0)):
        ran = series.node_s[phase] > 0
        assert ran.any(), phase
        # mean power in a bin = node power x the node-seconds the phase took in it / the bin's width
        assert np.allclose(series.power_w[phase][ran], watts * series.node_s[phase][ran] / series.width_s[ran])
    # the checkpoint dips: a bin wholly inside a snapshot draws the waiting power, not the step power
    full = series.node_s["checkpoint"] == series.node_s["checkpoint"].max()
    assert series.total_w[full].max() < 8000.0 * 64


def test_a_layout_switch_restarts_from_the_checkpoint_with_the_new_layout():
    """Layout b runs twice as fast; switching at the start costs its re-initialisation and load (400 s)."""
    a = job(0.0)
    b = dataclasses.replace(a, step_time_s=30.0, exposed_comm_s=3.0, tokens_per_second=a.tokens_per_second * 2)
    policy = Once([SetLayout("b")])
    result = simulate(a, policy=policy, layouts={"a": a, "b": b})
    assert to_ns(result.figures["wallclock_s"].mean) == to_ns(400.0) + replay(b).wallclock_ns
    assert [obs.layout for obs in policy.seen] == ["a"]
    switch = [r for r in result.log if r["kind"] == "restart"]
    assert [(r["time_ns"], r["duration_ns"], r["cause"]) for r in switch] == [(0, to_ns(400.0), "layout b")]
    # With failures: the switch after the first recovery; work is conserved and useful time is b's.
    failing = dataclasses.replace(a, failure_classes=job(1.0).failure_classes)
    fb = dataclasses.replace(b, failure_classes=failing.failure_classes)
    later = Once([SetLayout("b")], when=lambda obs: len(obs.failures) == 1)
    result = simulate(failing, policy=later, layouts={"a": failing, "b": fb}, seed=3)
    assert later.done and result.work["unbalanced_replications"] == 0
    assert 0 < result.figures["useful_time_share"].mean < 1
    with pytest.raises(InputError, match="layouts: c: nodes 8 differs"):
        simulate(a, layouts={"c": dataclasses.replace(a, nodes=8)})
    with pytest.raises(InputError, match="layout 'd' is not one of"):
        simulate(a, policy=Once([SetLayout("d")]), layouts={"b": b})


def test_node_repair_is_named_as_excluded():
    result = simulate(job(1.0), seed=0)
    assert any(e.startswith("node repair: the catalog has no repair time") for e in result.excluded)


def test_a_policy_sees_sites_caps_and_layout_but_no_signal_ahead(tmp_path, catalog_units):
    signal = "    signals: [{kind: cooling, start: 10 hour, duration: 1 hour, limit: 164 kW}]\n"
    sites = load_sites(sites_file(tmp_path, ONE_SITE + signal), catalog_units)
    policy = Once([SetCheckpointInterval(1200.0)], when=lambda obs: False)
    simulate(job(1.0), sites=sites, policy=policy, seed=4)
    first = policy.seen[0]
    assert first.site_nodes == (("east", 16),) and first.power_caps_w == (("east", 250e3),) and first.layout is None
    assert {obs.site_nodes for obs in policy.seen} >= {(("east", 16),)}
    assert all(f.name not in ("signals", "limits") for f in dataclasses.fields(first))


def test_the_power_series_between_breaks_matches_the_closed_form_at_every_bin_edge():
    """Single-site runs are interpolated between checkpoint snapshots' starts and ends; the phases' closed
    form evaluated at every bin edge (windows starting inside a snapshot included) gives the same."""
    from gpustack_sim.datacenter.power import _cumulative

    powers = {"node_power_checkpoint_w": 3000.0, "node_power_idle_w": 3000.0, "node_power_recovery_w": 2500.0}
    result = simulate(job(1.0, checkpoint_blocking_s=7.3, **powers), seed=3, replications=1, policy="fixed",
                      interval_s=600.0)
    assert result.figures["interruptions"].mean >= 1
    for window in ((0.0, 30000.0), (1201.0, 9000.0), (1203.5, 1207.0)):
        series = result.power_series("site", 0.7, window)
        edges = np.round(np.append(series.start_s, window[1]) * 1e9).astype(np.int64)
        exact = np.zeros((len(edges) - 1, 5))
        for piece in result.pieces[0]:
            nodes = dict(piece.site_nodes).get("site", 0)
            inside = (edges > piece.t0) & (edges < piece.t1)
            lo, hi = max(int(np.argmax(inside)) - 1, 0), len(edges) - int(np.argmax(inside[::-1]))
            if not inside.any() or piece.t0 >= edges[-1]:
                continue
            at = np.clip(edges[lo:hi + 1], piece.t0, piece.t1)
            exact[lo:hi] += np.diff(np.array([_cumulative(piece, int(t)) for t in at], dtype=float),
                                    axis=0) * nodes / 1e9
        for k, ph in enumerate(("compute", "communication", "checkpoint", "idle", "recovery")):
            assert np.allclose(series.node_s[ph], exact[:, k], rtol=0, atol=1e-6), (window, ph)
