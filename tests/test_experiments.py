"""Preregistered experiments: protocol checks with file:line errors, freezing, the power audit against
hand-computed cases, the conclusion rules case by case, deterministic content-addressed artifacts that
validate against their schema, and a results log that is never stale."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from gpustack_compiler.base.errors import InputError
from gpustack_sim.experiments import Workspace, audit, findings, freeze_protocol, load_protocol, run_protocol
from gpustack_sim.experiments import log as results_log
from gpustack_sim.experiments.lock import lock_status
from gpustack_sim.experiments.results import EvidenceResult, FalsifierResult, MetricResult
from gpustack_sim.experiments.runner import conclude, load_artifact
from gpustack_sim.experiments.stats import clopper_pearson, min_trials_proportion, t_ppf

REPO = Path(__file__).resolve().parent.parent
EXPERIMENTS = REPO / "experiments"
E001 = EXPERIMENTS / "protocols" / "E001.yaml"


@pytest.fixture(scope="module")
def engine():
    from gpustack_sim import Engine

    return Engine.open(REPO / "catalog", REPO / "build")


def workspace(tmp_path: Path, *ids: str, lock: bool = True) -> Workspace:
    """A private experiments folder holding copies of the given protocols (and the committed lock)."""
    d = tmp_path / "experiments"
    (d / "protocols").mkdir(parents=True)
    for i in ids:
        shutil.copy(EXPERIMENTS / "protocols" / f"{i}.yaml", d / "protocols" / f"{i}.yaml")
    if lock:
        shutil.copy(EXPERIMENTS / "protocols.lock", d / "protocols.lock")
    return Workspace(d, REPO)


# ---- the power audit: exact Clopper-Pearson against hand-computed cases -----------------------------

def test_clopper_pearson_hand_cases():
    # n successes of n: the 95% one-sided lower bound is 0.05 ** (1 / n).
    lo, hi = clopper_pearson(299, 299, 0.90)
    assert hi == 1.0 and lo == pytest.approx(0.05 ** (1 / 299), rel=1e-12) and lo >= 0.99
    assert clopper_pearson(298, 298, 0.90)[0] < 0.99
    # A textbook case: 5 of 10 at 95% two-sided is [0.1871, 0.8129].
    lo, hi = clopper_pearson(5, 10, 0.95)
    assert lo == pytest.approx(0.187086, abs=1e-6) and hi == pytest.approx(0.812914, abs=1e-6)
    assert t_ppf(0.95, 10) == pytest.approx(1.812461, abs=1e-6)
    assert t_ppf(0.975, 2) == pytest.approx(4.302653, abs=1e-6)


@pytest.mark.parametrize("op, bound, threshold, upper, expected", [
    ("ge", "lower", 0.99, None, 299),   # ln 0.05 / ln 0.99 = 298.07
    ("ge", "lower", 0.95, None, 59),    # ln 0.05 / ln 0.95 = 58.4
    ("le", "upper", 0.01, None, 299),   # no event in 299 trials: upper bound 1 - 0.05 ** (1/299)
    ("ge", "point", 0.95, None, 1),
    ("between", "point", 0.85, 0.95, 7),  # 6/7 = 0.857 is the first count inside [0.85, 0.95]
    ("gt", "lower", 1.0, None, None),   # a lower bound never exceeds 1
])
def test_min_trials_hand_cases(op, bound, threshold, upper, expected):
    assert min_trials_proportion(op, bound, threshold, upper, 0.90) == expected


def test_audit_flags_a_gate_that_cannot_pass(tmp_path, engine):
    text = E001.read_text().replace("planned_sample_size: 200", "planned_sample_size: 1")
    text = text.replace("    min_samples: 200\n", "    min_samples: 1\n")
    path = tmp_path / "E001.yaml"
    path.write_text(text)
    result = audit([load_protocol(path, engine.units)])
    flagged = {g.gate for g in result.flagged}
    assert flagged == {"F1", "F2", "F3"}  # a t bound needs 2 replications
    gate = next(g for g in result.gates if g.gate == "F1")
    assert gate.min_samples == 2 and gate.planned == 1 and "cannot pass" in gate.note


def test_committed_protocols_pass_their_audit(engine):
    protocols = Workspace.at(EXPERIMENTS, REPO).load_all(engine.units)
    assert {p.spec.id for p in protocols} == {f"E00{i}" for i in range(1, 7)}
    result = audit(protocols)
    assert result.flagged == []
    e003 = {g.gate: g for g in result.gates if g.protocol == "E003@1"}
    assert e003["F3"].min_samples == 299 and e003["F4"].min_samples == 299


# ---- protocol checks: one line, file:line, the field ------------------------------------------------

def _bad(tmp_path: Path, old: str, new: str) -> Path:
    text = E001.read_text()
    assert old in text
    path = tmp_path / "E001.yaml"
    path.write_text(text.replace(old, new, 1))
    return path


def _line_of(path: Path, needle: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if needle in line)


@pytest.mark.parametrize("case, old, new, needle, says", [
    ("unknown metric", "    metric: completion_time_ratio\n", "    metric: completion_time_ration\n",
     "metric: completion_time_ration", "falsifiers[2].metric: unknown metric 'completion_time_ration' "
     "(hint: did you mean completion_time_ratio"),
    ("unit mismatch", "threshold: 10 percent", "threshold: 10 s", "threshold: 10 s",
     "falsifiers[1].threshold: '10 s' is s, but metric 'collective_payload_byte_fraction' is in '1'"),
    ("unknown unit", "unit: day", "unit: fortnight", "unit: fortnight", "metrics[5].unit: unknown unit 'fortnight'"),
    ("no primary metric", "    primary: true\n", "    primary: false\n", None, None),
    ("extra key", "planned_sample_size: 200", "planned_sample_size: 200\nsample_size: 3", "sample_size: 3",
     "sample_size: Extra inputs are not permitted"),
    ("between without upper", "    op: ge\n    threshold: 0.95", "    op: between\n    threshold: 0.95",
     "op: between", "falsifiers[0].op: op between needs an upper end (`upper`)"),
    ("bad op", "    op: le\n    threshold: 1.0", "    op: lte\n    threshold: 1.0", "op: lte", "falsifiers[2].op"),
    ("missing scenario file", "sites: experiments/sites/e001_three_sites.yaml", "sites: experiments/sites/none.yaml",
     "sites: experiments/sites/none.yaml", "scenario.sites: experiments/sites/none.yaml not found in the repository"),
    ("path outside", "sites: experiments/sites/e001_three_sites.yaml", "sites: ../etc/passwd", "sites: ../etc/passwd",
     "scenario.sites: '../etc/passwd': give a path inside the repository"),
])
def test_bad_protocol_is_one_line_with_file_line_and_field(tmp_path, engine, case, old, new, needle, says):
    path = _bad(tmp_path, old, new)
    if case == "no primary metric":
        path.write_text(path.read_text().replace("    primary: true\n", ""))
        needle, says = "metrics:", "metrics: no primary metric"
    with pytest.raises(InputError) as exc:
        load_protocol(path, engine.units, "E001.yaml", REPO)
    message = str(exc.value)
    assert "\n" not in message
    assert message.startswith(f"E001.yaml:{_line_of(path, needle)}: "), message
    assert says in message, message


def test_primary_metric_must_be_covered(tmp_path, engine):
    path = _bad(tmp_path, "    metric: completion_time_ratio\n", "    metric: synchronous_wallclock\n")
    path.write_text(path.read_text().replace("mandatory: true", "mandatory: false"))  # no requirement covers it
    with pytest.raises(InputError, match=r"E001.yaml:\d+: metrics\[2\].name: primary metric 'completion_time_ratio' "
                                         r"is covered by no falsifier"):
        load_protocol(path, engine.units, "E001.yaml")


def test_yaml_errors_and_unsafe_input(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text("id: E001\nid: E002\n")
    with pytest.raises(InputError, match=r"^p.yaml:2: id: key given twice"):
        load_protocol(path, None, "p.yaml")
    path.write_text("a: &x [1]\nb: *x\n")
    with pytest.raises(InputError, match=r"^p.yaml:\d+: anchors and aliases are not allowed"):
        load_protocol(path, None, "p.yaml")
    path.write_text("id: !!python/object/apply:os.system ['true']\n")
    with pytest.raises(InputError, match=r"^p.yaml:1: "):
        load_protocol(path, None, "p.yaml")


def test_thresholds_are_converted_to_the_metric_unit(engine):
    e006 = load_protocol(EXPERIMENTS / "protocols" / "E006.yaml", engine.units)
    assert e006.thresholds["F1"].value == pytest.approx(0.20)  # "20 percent" on a metric in 1
    assert e006.thresholds["F5"].value == pytest.approx(900.0)  # "15 minute" on a metric in s
    e001 = load_protocol(E001, engine.units)
    assert e001.thresholds["F2"].value == pytest.approx(0.10)


# ---- freezing ---------------------------------------------------------------------------------------

def test_committed_protocols_are_frozen_and_unchanged(engine):
    ws = Workspace.at(EXPERIMENTS, REPO)
    entries = ws.lock()
    for p in ws.load_all(engine.units):
        assert lock_status(p, entries) == ("frozen", [])
    assert list(findings(ws, engine.units).items) == []


def test_editing_a_frozen_protocol_is_refused(tmp_path, engine):
    ws = workspace(tmp_path, "E001", lock=False)
    first = freeze_protocol(ws, "E001", engine.units)
    assert not first.already_frozen and (ws.directory / "protocols.lock").is_file()
    assert freeze_protocol(ws, "E001", engine.units).already_frozen
    path = ws.protocols_dir / "E001.yaml"
    path.write_text(path.read_text().replace("threshold: 10 percent", "threshold: 20 percent"))
    with pytest.raises(InputError, match=r"E001 version 1 differs from its frozen copy in falsifiers\[F2\]\.threshold"):
        freeze_protocol(ws, "E001", engine.units)
    with pytest.raises(InputError, match=r"differs from its frozen copy in falsifiers\[F2\]\.threshold"):
        run_protocol("E001", workspace=ws, engine_factory=lambda: engine, replications=2, write=False)
    found = findings(ws, engine.units).items
    assert [f.id for f in found] == ["experiment.frozen-edited"] and "falsifiers[F2].threshold" in found[0].message
    # A change is a new version with its reason; the old version stays in the lock.
    path.write_text(path.read_text().replace("version: 1", "version: 2", 1))
    with pytest.raises(InputError, match=r"version: version 2 needs a revision_reason"):
        freeze_protocol(ws, "E001", engine.units)
    path.write_text(path.read_text().replace("version: 2", "version: 2\nrevision_reason: test a new threshold", 1))
    second = freeze_protocol(ws, "E001", engine.units)
    assert second.key == "E001@2" and set(ws.lock()) == {"E001@1", "E001@2"}


def test_unfrozen_protocol_is_not_run(tmp_path, engine):
    ws = workspace(tmp_path, "E001", lock=False)
    with pytest.raises(InputError, match="E001 version 1 is not frozen"):
        run_protocol("E001", workspace=ws, engine_factory=lambda: engine, replications=2, write=False)


# ---- runs and artifacts -----------------------------------------------------------------------------

def test_rerun_gives_the_same_artifact_and_it_validates(tmp_path, engine):
    ws = workspace(tmp_path, "E001")
    ticks = []
    a = run_protocol("E001", workspace=ws, engine_factory=lambda: engine, replications=3, seed=7,
                     progress=lambda done, total: ticks.append((done, total)))
    path = ws.directory.parent / a.path
    first = path.read_bytes()
    b = run_protocol("E001", workspace=ws, engine_factory=lambda: engine, replications=3, seed=7)
    assert b.reused and b.artifact.artifact_sha256 == a.artifact.artifact_sha256 and path.read_bytes() == first
    assert ticks == [(0, 1), (1, 1)]  # 3 arms x 3 replications: one chunk (workers: test_distributed.py)
    art = a.artifact
    assert a.path == f"experiments/results/E001/{art.run_id}.json"
    assert art.common_random_numbers.verified is True
    assert load_artifact(path) == art
    text = first.decode()
    assert str(REPO) not in text and str(tmp_path) not in text  # nothing machine-specific is hashed
    schema = pytest.importorskip("jsonschema")
    schema.validate(json.loads(text), json.loads((REPO / "schemas" / "experiment_artifact.schema.json").read_text()))
    # The progress metric is unresolved, never a number; too few replications leave the min_samples evidence
    # missing (not failed); the payload falsifier fails on its own.
    metrics = {m.name: m for m in art.metrics}
    progress = metrics["progress_per_flop_ratio"]
    if (REPO / "catalog" / "presets" / "calibration_learning.yaml").is_file():
        assert progress.status == "resolved" and progress.evidence_class == "modeled"
        assert any("local small model" in n for n in progress.notes)
    else:  # no learning calibration: unresolved, naming it, and the controller abstains from every cadence
        assert progress.status == "unresolved" and progress.point is None
        assert progress.missing_capabilities == ["learning_calibration"]
        assert progress.evidence_class == "unmeasured"
        assert "no learning calibration" in progress.notes[0]
    assert metrics["completion_time_ratio"].evidence_class == "modeled"
    assert metrics["completion_time_ratio"].status == "resolved" and metrics["completion_time_ratio"].samples == 3
    ev1 = next(e for e in art.evidence if e.id == "EV1")
    assert ev1.status == "missing" and art.conclusion == "failed_virtual_screen"
    assert [f.id for f in art.falsifiers if f.status == "failed"] == ["F2"]
    # Another seed is another run.
    c = run_protocol("E001", workspace=ws, engine_factory=lambda: engine, replications=3, seed=8, write=False)
    assert c.artifact.run_id != art.run_id


def test_an_edited_artifact_is_detected(tmp_path, engine):
    ws = workspace(tmp_path, "E004")
    res = run_protocol("E004", workspace=ws, engine_factory=lambda: engine)
    art = res.artifact
    assert art.conclusion == "inconclusive" and all(m.status in ("unresolved", "deferred") for m in art.metrics)
    assert {c.name for c in art.missing_capabilities} >= {"inference_serving_simulation"}
    path = ws.directory.parent / res.path
    path.write_text(path.read_text().replace('"inconclusive"', '"survived_virtual"'))
    with pytest.raises(InputError, match="artifact_sha256 does not match"):
        load_artifact(path)


def test_real_stage_needs_measured_observations(tmp_path, engine):
    ws = workspace(tmp_path, "E002")
    with pytest.raises(InputError, match=r"--stage real needs measured observations .* RV1 \(rack power"):
        run_protocol("E002", workspace=ws, engine_factory=lambda: engine, stage="real")
    obs = tmp_path / "obs"
    obs.mkdir()
    with pytest.raises(InputError, match="holds no measured observations for: RV1"):
        run_protocol("E002", workspace=ws, engine_factory=lambda: engine, stage="real", observations=obs)
    (obs / "RV1.csv").write_text("t,w\n")
    res = run_protocol("E002", workspace=ws, engine_factory=lambda: engine, stage="real", observations=obs,
                       write=False)
    art = res.artifact
    assert art.conclusion == "inconclusive" and len(art.evaluation_ids) == 1 and art.calibration_ids == []
    assert "measured_observation_analysis" in {c.name for c in art.missing_capabilities}


def test_committed_artifacts_and_results_log():
    ws = Workspace.at(EXPERIMENTS, REPO)
    found = results_log.artifacts(ws)
    assert {a.protocol.id for _, a in found} >= {"E001", "E002"}
    schema = json.loads((REPO / "schemas" / "experiment_artifact.schema.json").read_text())
    jsonschema = pytest.importorskip("jsonschema")
    for path, a in found:
        jsonschema.validate(json.loads((REPO / path).read_text()), schema)
        assert not set(d.id for d in a.calibration_ids) & set(d.id for d in a.evaluation_ids)
    assert not results_log.stale(ws, REPO / "docs" / "results-log.md"), \
        "docs/results-log.md is stale: run `gpustack experiment log`"


# ---- the conclusion rules, case by case -------------------------------------------------------------

def _m(status="resolved", name="m"):
    return MetricResult(name=name, unit="1", primary=True, estimator="mean", status=status, interval_level=0.9,
                        point=None if status != "resolved" else 1.0)


def _f(status="passed", id="F1"):
    return FalsifierResult(id=id, metric="m", op="ge", bound="point", threshold=0.0, threshold_as_written="0",
                           status=status, reason="r")


def _e(status="satisfied", mandatory=True, id="EV1"):
    return EvidenceResult(id=id, kind="virtual_replay", mandatory=mandatory, earliest_stage="virtual",
                          acceptance="resolved", metrics=["m"], status=status, reason="r")


@pytest.mark.parametrize("stage, metrics, falsifiers, evidence, expected", [
    ("virtual", [_m()], [_f()], [_e()], "survived_virtual"),
    ("virtual", [_m()], [_f("failed")], [_e()], "failed_virtual_screen"),
    ("virtual", [_m()], [_f()], [_e("failed")], "failed_virtual_screen"),
    ("virtual", [_m()], [_f()], [_e("failed", mandatory=False)], "survived_virtual"),
    ("virtual", [_m()], [_f()], [_e("missing")], "inconclusive"),
    ("virtual", [_m()], [_f()], [_e("missing", mandatory=False)], "inconclusive"),
    ("virtual", [_m("unresolved")], [_f("unresolved")], [_e()], "inconclusive"),
    ("virtual", [_m(), _m("unresolved", "n")], [_f()], [_e()], "inconclusive"),
    ("virtual", [_m("unresolved")], [_f("failed"), _f("unresolved", "F2")], [_e("missing")], "failed_virtual_screen"),
    ("virtual", [_m("deferred")], [_f("deferred")], [_e("deferred")], "survived_virtual"),
    ("real", [_m()], [_f()], [_e()], "survived_real_validation"),
    ("real", [_m()], [_f("failed")], [_e()], "failed_real_validation"),
])
def test_conclusion_rules(stage, metrics, falsifiers, evidence, expected):
    conclusion, reasons = conclude(stage, metrics, falsifiers, evidence)
    assert conclusion == expected and reasons
    if expected == "survived_virtual":
        assert any("validates no claim about a real datacenter" in r for r in reasons)


def test_interval_bounds_are_finite_and_ordered(tmp_path, engine):
    ws = workspace(tmp_path, "E002")
    art = run_protocol("E002", workspace=ws, engine_factory=lambda: engine, replications=4, write=False).artifact
    m = next(m for m in art.metrics if m.name == "time_to_target_regression")
    assert m.lower <= m.point <= m.upper and all(math.isfinite(x) for x in (m.lower, m.point, m.upper))
    deferred = {m.name for m in art.metrics if m.status == "deferred"}
    assert deferred == {"waveform_nrmse", "interval_coverage_90"}
    assert {f.id for f in art.falsifiers if f.status == "deferred"} == {"F5", "F6"}
    assert next(e for e in art.evidence if e.id == "EV1").status == "missing"  # 4 < 200 replications
    # Every phase has a node power and the spectral analysis runs: no capability is missing.
    assert art.missing_capabilities == []
    resolved = {m.name: m for m in art.metrics if m.status == "resolved"}
    assert set(resolved) == {"danger_band_energy_reduction", "time_to_target_regression",
                             "admission_capacity_gain", "invariant_violations"}
    # Halving the checkpoint dips' rate at most halves the band energy: recoveries, common to both arms,
    # carry band energy too.
    assert 0 < resolved["danger_band_energy_reduction"].point <= 0.5 + 1e-6
    assert resolved["invariant_violations"].point == 0
    # Neither arm's peak moves (every node stepping): nothing more to admit, F3 fails and so does the screen.
    assert resolved["admission_capacity_gain"].point == 0
    assert art.conclusion == "failed_virtual_screen"
    assert next(f for f in art.falsifiers if f.id == "F3").status == "failed"


def test_docs_example_runs(monkeypatch):
    text = (REPO / "docs" / "experiments.md").read_text()
    block = text.split("```python\n", 1)[1].split("```", 1)[0]
    monkeypatch.chdir(REPO)
    exec(compile(block, "docs/experiments.md", "exec"), {})


def test_committed_experiment_schemas_are_fresh():
    from gpustack_compiler.build import schema as schema_mod

    assert {"protocol.schema.json", "experiment_artifact.schema.json"} <= set(schema_mod.SCHEMA_FILES)
    assert schema_mod.stale(REPO / "schemas") == []
