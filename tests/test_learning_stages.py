"""The learning model's calibration, validation and the E001 real stage on local learning observations.
The observation files here are test fixtures made in a temporary folder (rows generated from the catalog's own
model at known roots, or hand-written curves), never measurements: the measured set is gpustack learn's."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from helpers import REPO, run_cli_here
from test_learning_model import CONDITION, TRUE

from gpustack_sim import api
from gpustack_sim.analyses.calibrate import learning_calibration
from gpustack_sim.analyses.validate import validate_learning
from gpustack_sim.engine.observation import load_observations

HEX = "0" * 64


def _row(oid: str, split: str, assign: dict, value: float, curves: list[str], decision: str | None = None,
         inadmissible: str | None = None) -> dict:
    row = {"id": oid, "split": split, "panel": "local_learning_fixture",
           "measured": {"value": value, "units": "nat/token",
                        "uncertainty": {"kind": "seed_spread", "low": value * 0.99, "high": value * 1.01}},
           "measures": {"variable": "learning.loss.final"},
           "learning": {"condition": oid, "method": "local_sgd" if assign["learning.local_steps"] > 1 else
                        "data_parallel", "assign": assign, "seeds": list(range(len(curves))),
                        "seed_values": [value] * len(curves), "curves": curves,
                        "provenance": {"config": "fixture", "config_sha256": HEX, "code_sha256": HEX,
                                       "catalog_sha256": HEX, "corpus": "fixture", "corpus_sha256": HEX,
                                       "machine": "fixture", "software": "fixture"}},
           "source": {"reference": "gpustack_local_learning", "locator": "test fixture", "licence": "fixture"}}
    if decision:
        row["decision"] = {"group": decision, "better": "lower"}
    if inadmissible:
        row["inadmissible"] = inadmissible
    return row


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("# yaml-language-server: $schema=../../schemas/observations.schema.json\n"
                    + yaml.safe_dump({"observations": rows}, sort_keys=False))
    return path


def _assign(h: int, tokens: float, **faults) -> dict:
    a = {k: (float(v.split()[0]) if isinstance(v, str) else float(v)) for k, v in CONDITION.items()}
    a.update({"learning.local_steps": h, "learning.tokens": tokens, **faults})
    return a


@pytest.fixture(scope="module")
def learning_catalog(tmp_path_factory, engine):
    """A private catalog (a copy of the repository's) with a learning calibration fitted to fixture rows made by
    the model itself at the roots of test_learning_model.TRUE, and the fixture files."""
    tmp = tmp_path_factory.mktemp("learning")
    truth = engine.scenario(assign={**TRUE})

    def loss(assign: dict) -> float:
        scenario = engine.scenario(assign={**assign, "learning.tokens": f"{assign['learning.tokens']!r} token"})
        scenario.assignments.update(truth.assignments)
        return engine.resolve("learning.loss.final", scenario).value

    cal = [(f"cal-h{h}-d{int(d)}", _assign(h, d)) for h in (1, 2, 4, 8) for d in (2e6, 8e6)]
    cal += [("cal-stale2", _assign(1, 4e6, **{"learning.fault.staleness": 2.0})),
            ("cal-k2-h2", _assign(2, 4e6, **{"learning.replicas": 2.0}))]
    ev = [("ev-h4", _assign(4, 4e6)), ("ev-h1", _assign(1, 4e6)), ("ev-h16", _assign(16, 4e6))]
    obs = tmp / "observations"
    obs.mkdir()
    (obs / "c.json").write_text(json.dumps({"events": {"lost_steps": 0, "rollbacks": 0}, "points": []}))
    (obs / "r.json").write_text(json.dumps({"events": {"lost_steps": 120, "rollbacks": 10}, "points": []}))
    rollback = _assign(1, 4e6, **{"learning.fault.rollback_rate": 0.005, "learning.fault.steps_lost_per_rollback": 12})
    _write(obs / "cal.yaml", [_row(i, "calibration", a, round(loss(a), 6), ["c.json"]) for i, a in cal]
           + [_row("cal-rollback", "calibration", rollback, round(loss(rollback), 6), ["r.json"])]
           + [_row("cal-diverged", "calibration", _assign(2, 4e6), 9.9, ["c.json"], inadmissible="seed 0 diverged")])
    _write(obs / "ev.yaml", [_row(i, "evaluation", a, round(loss(a), 6), ["c.json"], decision="which_h")
                             for i, a in ev])
    return tmp, obs


@pytest.fixture(scope="module")
def calibrated(engine, learning_catalog):
    """The learning calibration of the fixture rows, and an engine over a catalog copy that holds it."""
    tmp, obs = learning_catalog
    items = load_observations([obs / "cal.yaml"])
    cal = learning_calibration(engine.resolver, engine.scenarios, engine.facts, items,
                               set(engine.tables.references))
    catalog = tmp / "catalog"
    shutil.copytree(REPO / "catalog", catalog)
    (catalog / "presets" / "calibration_learning.yaml").write_text(cal.preset_text)
    return cal, api.Engine.open(catalog, tmp / "build")


def test_learning_calibration_and_held_out_validation(engine, learning_catalog, calibrated):
    tmp, obs = learning_catalog
    cal, mine = calibrated
    assert "cal-diverged" in cal.skipped and "cal-diverged" not in cal.observations  # never fitted to
    assert cal.parameters["local_step_penalty_sgd"]["value"] == pytest.approx(0.02, rel=0.05)
    assert "replay_worth" not in cal.parameters  # no replay condition among the rows: not fitted
    assert "territory:" in cal.preset_text and "learning.local_steps: [1, 8]" in cal.preset_text
    with pytest.raises(Exception, match="evaluation"):  # graded data is never fitted to
        learning_calibration(engine.resolver, engine.scenarios, engine.facts, load_observations([obs / "ev.yaml"]),
                             set(engine.tables.references))
    result = validate_learning(mine.resolver, mine.scenarios, mine.facts, [obs / "ev.yaml"], samples=40, seed=0,
                               references=set(mine.tables.references))
    panel = result.panels["local_learning_fixture"]
    assert panel["n"] == 3 and panel["mape"] < 0.01  # rows the model itself made, at roots it recovered
    assert panel["kendall_tau_b"] == pytest.approx(1.0)  # the ordering of H
    assert panel["decisions"][0]["regret"] == pytest.approx(0.0)  # which H: the best one chosen
    assert "90%" in panel["coverage"]
    by_id = {r["id"]: r for r in result.rows}
    assert by_id["ev-h16"]["outside_territory"] == ["learning.local_steps = 16 outside the calibrated [1, 8]"]
    assert not by_id["ev-h4"]["outside_territory"]
    with pytest.raises(Exception, match="evaluation observations only"):  # fitted data cannot grade the model
        validate_learning(mine.resolver, mine.scenarios, mine.facts, [obs / "cal.yaml"], samples=4,
                          references=set(mine.tables.references))


def test_e001_progress_through_the_calibrated_learning_model(tmp_path, calibrated):
    from gpustack_sim.experiments.runner import run_protocol
    from gpustack_sim.experiments.workspace import Workspace

    _, mine = calibrated
    ws = tmp_path / "experiments"
    (ws / "protocols").mkdir(parents=True)
    shutil.copy(REPO / "experiments" / "protocols" / "E001.yaml", ws / "protocols" / "E001.yaml")
    shutil.copy(REPO / "experiments" / "protocols.lock", ws / "protocols.lock")
    result = run_protocol("E001", workspace=Workspace(ws, REPO), engine_factory=lambda: mine, replications=3,
                          write=False)
    progress = next(m for m in result.artifact.metrics if m.name == "progress_per_flop_ratio")
    assert progress.status == "resolved", progress.notes
    assert progress.evidence_class == "modeled" and progress.samples == 3
    # H = 2 on 3 replicas at the fitted penalty 0.02: eta = 1 / (1 + 0.02 x 1 x 2/3), a little below 1
    assert 0.9 < progress.point < 1.0 and progress.lower is not None
    assert any("local small model" in n for n in progress.notes)
    assert "abstained 0 time(s)" in progress.notes[0]


def _curve(folder: Path, points: list[dict]) -> str:
    """A content-addressed curve file, as the workload names them."""
    import hashlib

    body = json.dumps({"format": 1, "points": points}).encode()
    path = folder / f"{hashlib.sha256(body).hexdigest()}.json"
    path.write_bytes(body)
    return path.name


def _real_stage(tmp_path: Path, drop: str | None = None, inadmissible: str | None = None):
    obs = tmp_path / "obs"
    obs.mkdir()
    rows = []
    for h, start, end in ((1, 5.0, 3.0), (4, 5.0, 3.2)):
        curves = []
        for seed in (0, 1, 2):
            points = [{"tokens": 0, "flops": 0.0, "loss": start + 0.01 * seed},
                      {"tokens": 100, "flops": 600.0, "loss": end + 0.01 * seed}]
            if drop:
                for p in points:
                    p.pop(drop)
            curves.append(_curve(obs, points))
        rows.append(_row(f"rv-h{h}", "evaluation", _assign(h, 4e6), end, curves, inadmissible=inadmissible))
    _write(obs / "RV1.yaml", rows)
    ws = tmp_path / "experiments"
    (ws / "protocols").mkdir(parents=True)
    shutil.copy(REPO / "experiments" / "protocols" / "E001.yaml", ws / "protocols" / "E001.yaml")
    shutil.copy(REPO / "experiments" / "protocols.lock", ws / "protocols.lock")
    return run_cli_here("experiment", "run", "E001", "--stage", "real", "--observations", str(obs), "--dir", str(ws),
                        "--json")


def test_real_stage_scores_measured_loss_curves(tmp_path):
    result = _real_stage(tmp_path)
    assert result.returncode == 0, result.stderr  # a verdict, not an error
    out = json.loads(result.stdout)
    art = out.get("artifact", out)
    progress = next(m for m in art["metrics"] if m["name"] == "progress_per_flop_ratio")
    assert progress["status"] == "resolved" and progress["evidence_class"] == "measured"
    assert progress["point"] == pytest.approx(1.8 / 2.0)  # (5 - 3.2) / 600 over (5 - 3) / 600, every seed
    assert any("no claim of transfer" in n for n in progress["notes"])
    wall = next(m for m in art["metrics"] if m["name"] == "completion_time_ratio")
    assert wall["status"] == "unresolved" and wall["evidence_class"] == "unmeasured"
    assert art["conclusion"] == "failed_real_validation"  # F1: 0.9 < 0.95
    # the results log (of the artifact the run wrote) shows each metric's evidence class
    from gpustack_sim.experiments.log import render
    from gpustack_sim.experiments.workspace import Workspace

    log = render(Workspace(tmp_path / "experiments", REPO))
    row = next(line for line in log.splitlines() if "progress_per_flop_ratio" in line and "|" in line)
    assert "| measured |" in row
    assert "| unmeasured |" in next(line for line in log.splitlines()
                                    if line.startswith("| **completion_time_ratio**"))


def test_real_stage_refuses_a_curve_without_a_required_series(tmp_path):
    result = _real_stage(tmp_path, drop="flops")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) <= 2 and "lacks the series `flops`" in lines[0] and "rv-h1" in lines[0]


def test_real_stage_never_scores_inadmissible_measurements(tmp_path):
    result = _real_stage(tmp_path, inadmissible="seed 1 diverged: loss not finite")
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    art = out.get("artifact", out)
    progress = next(m for m in art["metrics"] if m["name"] == "progress_per_flop_ratio")
    assert progress["status"] == "unresolved" and progress["evidence_class"] == "inadmissible"
    assert any("2 inadmissible condition(s) set aside" in n and "diverged" in n for n in progress["notes"])
    assert art["conclusion"] == "inconclusive"
