"""The resolver: fixture values, traces, missing roots, units of assignments, checks, variants, and
the relation kinds beyond identities."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import CATALOG, FIXTURE, SYSTEM_MODELINE, Engine, mini_catalog

from gpustack_sim.engine.resolver import ResolveError

EXPECTED = {
    "training.tokens_per_sec": 6666666.67,
    "econ.job.dc_power": 5200.0,
    "econ.run.power_cost": 0.00078,
    "econ.cost.per_token": 3.000078e-06,
}


@pytest.mark.parametrize("target", sorted(EXPECTED))
def test_fixture_values(real_engine: Engine, target: str) -> None:
    res = real_engine.resolve(target, [FIXTURE])
    assert res.missing == {}
    expected = EXPECTED[target] if target != "training.tokens_per_sec" else 1e6 / 0.15
    assert abs(res.value - expected) / expected < 1e-9
    assert not res.violated


def test_trace_shows_each_step(real_engine: Engine) -> None:
    res = real_engine.resolve("training.tokens_per_sec", [FIXTURE])
    steps = {s.variable: s for s in res.trace}
    t_step = steps["training.t_step"]
    assert t_step.relation == "training.t_step.compose" and t_step.kind == "identity"
    assert t_step.inputs["training.t_compute"] == pytest.approx(0.125) and t_step.value == pytest.approx(0.15)
    assert t_step.units == "s"
    assert steps["training.flops_per_step"].variant == "dense"
    assert steps["par.n_gpus"].kind == "assigned" and "dense_training_cost_fixture" in steps["par.n_gpus"].note
    # evaluation order is dependency order
    order = [s.variable for s in res.trace]
    assert order.index("training.t_compute") < order.index("training.t_step") < order.index("training.tokens_per_sec")


def test_assigned_variable_is_a_boundary(real_engine: Engine) -> None:
    res = real_engine.resolve("training.tokens_per_sec", [FIXTURE], assign=["training.t_step=0.5 s"])
    assert res.value == pytest.approx(2e6)
    assert "training.t_compute" not in {s.variable for s in res.trace}


def fixture_without(real_engine: Engine, *holes: str):
    scenario = real_engine.scenarios.build([FIXTURE])
    for hole in holes:
        del scenario.assignments[hole]
    return scenario


def test_missing_roots_stay_symbolic_grouped_by_family(real_engine: Engine) -> None:
    holes = ["cluster.node.cpu_power", "econ.power.price_kwh_peak"]
    res = real_engine.resolver.resolve("econ.cost.per_token", fixture_without(real_engine, *holes))
    assert set(res.missing) == set(holes)
    assert res.value is None and "cluster.node.cpu_power" in res.expression
    fams = res.missing_by_family()
    assert fams["node_power"]["roots"] == ["cluster.node.cpu_power"]
    assert fams["power_tariff"]["category"] == "scenario_boundary"


@pytest.mark.parametrize("assignment,expected_si", [
    ("gpu.power.total=0.5 kW", 500.0),
    ("gpu.power.total=0.0005 MW", 500.0),
    ("econ.power.price_kwh_peak=0.36 USD/kWh", 0.36 / 3.6e6),
    ("econ.power.price_kwh_peak=360 USD/MWh", 0.36 / 3.6e6),
    ("gpu.peak_flops_power_limited=989.4 TFLOP/s", 989.4e12),
    ("training.t_exposed_comm=25 ms", 0.025),
    ("training.t_exposed_comm=0.025", 0.025),
])
def test_assignment_units(real_engine: Engine, assignment: str, expected_si: float) -> None:
    name, value = assignment.split("=")
    scenario = real_engine.scenarios.build(assign={name: value})
    assert scenario.assignments[name].value == pytest.approx(expected_si, rel=1e-12)


def test_assignment_unit_errors(real_engine: Engine) -> None:
    from gpustack_compiler.base.errors import InputError

    for bad in ("gpu.power.total=3 GHz", "gpu.power.total=fast", "gpu.power.total=5 furlong", "gpu.power.totl=5 W"):
        with pytest.raises(InputError):
            real_engine.scenarios.build(assign=dict([bad.split("=")]))


def test_variant_errors(real_engine: Engine) -> None:
    with pytest.raises(ResolveError, match="needs a variant selection") as exc:
        real_engine.resolve("training.flops_per_step")
    assert "dense" in exc.value.hint and "moe" in exc.value.hint
    with pytest.raises(ResolveError, match="no variant `sparse`"):
        real_engine.resolve("training.flops_per_step", variants=["training.flops_per_step=sparse"])


def test_cli_resolve_and_violation_exit_code(gpustack_cli, real_build: Path) -> None:
    base = ["--catalog", str(CATALOG), "--build-dir", str(real_build)]
    ok = gpustack_cli(*base, "resolve", "econ.cost.per_token", "--preset", FIXTURE, "--json")
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["value"] == pytest.approx(3.000078e-06, rel=1e-9)
    text = gpustack_cli(*base, "resolve", "econ.cost.per_token", "--preset", FIXTURE)
    assert text.stdout.splitlines()[0] == "econ.cost.per_token = 3.000078e-06 USD/token"
    # an assigned value outside its catalog bounds is refused (exit 1) ...
    bad = gpustack_cli(*base, "resolve", "training.t_step", "--preset", FIXTURE, "--assign",
                       "training.overhead_fraction=1.5")
    assert bad.returncode == 1 and bad.stdout == ""
    assert bad.stderr.startswith("Error: --assign: `training.overhead_fraction` = 1.5: 1.5 outside [0.0, 0.99]")
    # ... unless allowed, when it is listed as violated, and exit 1 only when asked
    allowed = gpustack_cli(*base, "resolve", "training.t_step", "--preset", FIXTURE, "--assign",
                           "training.overhead_fraction=1.5", "--allow-violations")
    assert allowed.returncode == 0 and "violated" in allowed.stdout
    bad = gpustack_cli(*base, "resolve", "training.t_step", "--preset", FIXTURE, "--assign",
                       "training.overhead_fraction=1.5", "--allow-violations", "--fail-on-violated-constraints")
    assert bad.returncode == 1 and "violated" in bad.stdout
    unknown = gpustack_cli(*base, "resolve", "econ.cost.per_tokn")
    assert unknown.returncode == 2 and "did you mean econ.cost.per_token" in unknown.stderr
    malformed = gpustack_cli(*base, "resolve", "econ.cost.per_token", "--assign", "gpu.power.total")
    assert malformed.returncode == 2 and malformed.stderr.startswith("Error: --assign")


def test_scenario_audit_on_the_real_catalog(gpustack_cli, real_build: Path) -> None:
    """Every sourced preset resolves the targets it advertises from itself alone."""
    res = gpustack_cli("--catalog", str(CATALOG), "--build-dir", str(real_build), "scenario", "audit", "--json")
    data = json.loads(res.stdout)
    assert data["not_ok"] == [] and res.returncode == 0, [
        (r["preset"], [t for t in r["targets"] if t["status"] != "ok"]) for r in data["presets"] if r["status"] != "ok"]
    b200 = next(r for r in data["presets"] if r["preset"] == "gpu_b200")
    assert {t["label"] for t in b200["targets"] if t["status"] == "ok"} >= {"l2_bandwidth", "peak_bf16_dense"}


def test_scenario_report(gpustack_cli, real_build: Path) -> None:
    res = gpustack_cli("--catalog", str(CATALOG), "--build-dir", str(real_build), "scenario", "report", FIXTURE, "--json",
              "--target", "pue=thermal.dc.pue", "--fail-on-issues")
    assert res.returncode == 0, res.stderr + res.stdout
    rep = json.loads(res.stdout)
    assert rep["status"] == "ok" and rep["counts"]["ok"] == 5
    pue = next(t for t in rep["targets"] if t["label"] == "pue")
    assert pue["value"] == pytest.approx(5200 / 4400)


# ---- relation kinds on a small catalog ----------------------------------------------------------

KINDS = SYSTEM_MODELINE + """variables:
  - {name: econ.x, units: s, description: input, references: [narayanan2021_megatron], root: {category: scenario_boundary, family: t}}
  - {name: econ.k, units: "1", description: gain, references: [narayanan2021_megatron], root: {category: scenario_boundary, family: t}}
  - {name: econ.pw, units: s, description: piecewise, references: [narayanan2021_megatron]}
  - {name: econ.fixed, units: s, description: fixed point, references: [narayanan2021_megatron]}
  - {name: econ.decay, units: s, description: ode state, references: [narayanan2021_megatron]}
  - {name: econ.rnd, units: s, description: random, references: [narayanan2021_megatron]}
  - {name: econ.approx, units: s, description: approximate, references: [narayanan2021_megatron]}
relations:
  - name: econ.pw.rule
    kind: piecewise
    defines: econ.pw
    pieces:
      - {when: "econ.x < unit('s')", expression: "2 * econ.x"}
      - {expression: "econ.x + unit('s')"}
    description: two regimes
    references: [narayanan2021_megatron]
  - name: econ.fixed.rule
    kind: iterative
    defines: econ.fixed
    expression: "econ.x + econ.k * econ.fixed"
    initial: "econ.x"
    tolerance: 1e-12
    max_iterations: 1000
    description: x / (1 - k) as a fixed point
    references: [narayanan2021_megatron]
  - name: econ.decay.rule
    kind: differential
    defines: econ.decay
    with_respect_to: econ.k
    expression: "-econ.decay"
    initial: "econ.x"
    description: exponential decay in k
    references: [narayanan2021_megatron]
  - name: econ.rnd.rule
    kind: stochastic
    defines: econ.rnd
    distribution: uniform
    parameters: {low: "econ.x", high: "3 * econ.x"}
    description: uniform between x and 3x
    references: [narayanan2021_megatron]
  - name: econ.approx.small
    kind: approximation
    defines: econ.approx
    expression: "econ.x"
    validity: "econ.k < 0.1"
    description: valid for small k
    references: [narayanan2021_megatron]
  - name: econ.approx.exact
    kind: variant
    variant: exact
    defines: econ.approx
    expression: "econ.x * (1 + econ.k)"
    description: exact
    references: [narayanan2021_megatron]
  - name: econ.k.small
    kind: constraint
    expression: "econ.k < 1"
    description: the fixed point exists
    references: [narayanan2021_megatron]
"""


@pytest.fixture(scope="module")
def kinds(tmp_path_factory) -> Engine:
    root = mini_catalog(tmp_path_factory.mktemp("kinds"))
    (root / "economics" / "kinds.yaml").write_text(KINDS)
    return Engine(root)


def test_piecewise(kinds: Engine) -> None:
    assert kinds.resolve("econ.pw", assign=["econ.x=0.5 s"]).value == pytest.approx(1.0)
    assert kinds.resolve("econ.pw", assign=["econ.x=3 s"]).value == pytest.approx(4.0)


def test_iterative_fixed_point(kinds: Engine) -> None:
    res = kinds.resolve("econ.fixed", assign=["econ.x=2 s", "econ.k=0.5"])
    assert res.value == pytest.approx(4.0, rel=1e-9)
    assert "fixed point after" in res.trace[-1].note


def test_unevaluated_iterative_names_what_it_lacks(kinds: Engine) -> None:
    """A fixed point left symbolic is no answer: the roots it waits on are missing, and it says so."""
    res = kinds.resolve("econ.fixed", assign=["econ.x=2 s"])
    assert res.value is None and set(res.missing) == {"econ.k"}
    assert res.unevaluated == {"econ.fixed": ["econ.k"]}
    # with its inputs known it converges and nothing stands unevaluated
    assert kinds.resolve("econ.fixed", assign=["econ.x=2 s", "econ.k=0.5"]).unevaluated == {}


def test_cli_unevaluated_iterative_exits_1(gpustack_cli, real_build: Path) -> None:
    """The junction temperature's fixed point with its thermal roots left out: listed, exit 1."""
    variants = ["gpu.transistor_count=datasheet", "physical.mosfet.i_off=spec", "gpu.power.board_overhead=calibrated",
                "mem.hbm.refresh_overhead_factor=calibrated", "mem.hbm.energy_per_bit=calibrated",
                "gpu.energy_per_flop=calibrated", "thermal.gpu.h_cold_plate=calibrated"]
    args = ["--catalog", str(CATALOG), "--build-dir", str(real_build), "resolve", "thermal.gpu.t_junction",
            "--preset", "gpu_h100_sxm", *(a for v in variants for a in ("--variant", v))]
    res = gpustack_cli(*args)
    assert res.returncode == 1
    assert "thermal.gpu.t_junction left unevaluated: its relation needs" in res.stdout
    assert "thermal.coolant.t_supply" in res.stdout and "missing root(s)" in res.stdout
    assert "could not be evaluated: thermal.gpu.t_junction" in res.stderr
    data = json.loads(gpustack_cli(*args, "--json").stdout)
    assert "thermal.leakage.vth" in data["unevaluated"]["thermal.gpu.t_junction"]
    assert "thermal.leakage.vth" in data["missing"]


def test_differential_rk4(kinds: Engine) -> None:
    import math

    res = kinds.resolve("econ.decay", assign=["econ.x=2 s", "econ.k=0.7"])
    assert res.value == pytest.approx(2 * math.exp(-0.7), rel=1e-9)


def test_stochastic_mean(kinds: Engine) -> None:
    assert kinds.resolve("econ.rnd", assign=["econ.x=2 s"]).value == pytest.approx(4.0)


def test_approximation_validity_and_fallback(kinds: Engine) -> None:
    with pytest.raises(ResolveError, match="needs a variant selection"):
        kinds.resolve("econ.approx", assign=["econ.x=2 s", "econ.k=0.5"])
    picked = kinds.resolve("econ.approx", assign=["econ.x=2 s", "econ.k=0.5"], variants=["econ.approx=econ.approx.small"])
    assert picked.value == pytest.approx(2.0)
    assert [c.status for c in picked.checks if c.kind == "validity"] == ["violated"]
    fallen = kinds.resolve("econ.approx", assign=["econ.x=2 s", "econ.k=0.5"],
                           variants=["econ.approx=econ.approx.small"], fallback_on_invalid=True)
    assert fallen.value == pytest.approx(3.0)
    assert fallen.fallbacks == ["econ.approx: econ.approx.small -> econ.approx.exact"]


def test_constraint_states(kinds: Engine) -> None:
    ok = kinds.resolve("econ.fixed", assign=["econ.x=2 s", "econ.k=0.5"])
    assert [(c.name, c.status) for c in ok.checks if c.kind == "constraint"] == [("econ.k.small", "satisfied")]
    sym = kinds.resolve("econ.pw", assign=["econ.x=3 s"])
    assert not [c for c in sym.checks if c.kind == "constraint"]  # econ.k is not in this cone


def test_solve_for_a_missing_root(real_engine: Engine) -> None:
    """t_step assigned and t_compute's input efficiency left out: --solve recovers the efficiency."""
    scenario = fixture_without(real_engine, "training.compute_efficiency")
    scenario.assignments.update(real_engine.scenarios.build(assign={"training.t_compute": "0.25 s"}).assignments)
    plain = real_engine.resolver.resolve("training.tokens_per_sec", scenario)
    assert plain.value == pytest.approx(1e6 / 0.275)  # t_compute assigned: a boundary, nothing missing
    unsolved = real_engine.resolver.resolve("training.compute_efficiency", scenario)
    assert unsolved.value is None and list(unsolved.missing) == ["training.compute_efficiency"]
    solved = real_engine.resolver.resolve("training.compute_efficiency", scenario, solve=True)
    # t_compute = 1e15 FLOP / (8 * 1e15 FLOP/s * eff) = 0.25 s  =>  eff = 0.5
    assert solved.value == pytest.approx(0.5) and solved.missing == {}
    assert solved.solved == {"training.compute_efficiency": pytest.approx(0.5)}
