"""The local learning workload (`gpustack learn`, gpustack_sim/learning/): a real JAX training loop on the
shipped corpus. The smoke config trains; the same seed gives the same bytes and another seed other bytes;
each injected fault moves the trajectory the way it should; admissibility and the split follow their rules;
a bad config is one line, exit 2, and nothing written."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from helpers import REPO, run_cli_here

SMOKE = REPO / "runs" / "learning" / "smoke.yaml"
CALIBRATION = REPO / "runs" / "learning" / "calibration.yaml"


def _files(root: Path) -> dict[str, bytes]:
    """Every written file but the measured wallclock, by path under `root`."""
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and "wallclock" not in p.parts}


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    base = tmp_path_factory.mktemp("learn")
    first = run_cli_here("learn", str(SMOKE), "--out", str(base / "a"), "--plot", str(base / "smoke.png"))
    second = run_cli_here("learn", str(SMOKE), "--out", str(base / "b"))
    return base, first, second


def _curves(out: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((out / "learning").glob("*.json"))]


def test_smoke_run_trains_and_writes_observations(smoke):
    from gpustack_sim.engine.observation import load_observations

    base, first, _ = smoke
    assert first.returncode == 0, first.stderr
    curves = _curves(base / "a")
    assert len(curves) == 4  # two conditions, two seeds
    for c in curves:
        losses = [p["loss"] for p in c["points"]]
        # From about ln 256 = 5.5 nat/token (uniform over bytes) to well below it.
        assert losses[0] > 5.0 and losses[-1] < losses[0] - 1.5, (c["condition"], c["seed"], losses)
        assert [p["tokens"] for p in c["points"]] == sorted(p["tokens"] for p in c["points"])
        assert c["points"][-1]["tokens"] >= c["token_budget"]
        assert c["points"][-1]["flops"] == pytest.approx(c["points"][-1]["tokens"] * c["flops_per_token"])
    items = load_observations([base / "a" / "observations"])
    assert {i.obs.learning.condition for i in items} == {"dp-k2", "diloco-k2-h4"}
    for i in items:
        u = i.obs.measured.uncertainty
        assert u.kind == "seed_spread" and u.low <= i.obs.measured.value <= u.high
        assert i.obs.measured.value == pytest.approx(sum(i.obs.learning.seed_values) / 2, rel=1e-5)
        assert i.obs.measures.variable == "learning.loss.final" and i.obs.measured.units == "nat/token"
        prov = i.obs.learning.provenance
        assert prov.corpus_sha256 == "703d1225d2fb927653bfd8b00e4e96938e0b630c6023edd26702ac6ed50383f8"
        for rel in i.obs.learning.curves:  # content-addressed: the name is the hash of the bytes
            import hashlib
            path = i.file.parent / rel
            assert hashlib.sha256(path.read_bytes()).hexdigest() == path.stem
        assert "frontier" in i.obs.note
    assert (base / "smoke.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert list((base / "a" / "learning" / "wallclock").glob("*.json"))


def test_same_seed_gives_the_same_bytes(smoke):
    base, first, second = smoke
    assert first.returncode == 0 and second.returncode == 0
    a, b = _files(base / "a"), _files(base / "b")
    assert a and a == b


def test_different_seeds_differ(smoke):
    base, _, _ = smoke
    by = {(c["condition"], c["seed"]): c for c in _curves(base / "a")}
    for cond in ("dp-k2", "diloco-k2-h4"):
        assert by[(cond, 0)]["points"] != by[(cond, 1)]["points"]
        assert by[(cond, 0)]["points"][-1]["loss"] != by[(cond, 1)]["points"][-1]["loss"]


# ---- faults ----------------------------------------------------------------------------------------

FAULTS = {
    "rollback": {"rollback_rate": 0.1},
    "replay": {"replay_rate": 0.5},
    "staleness": {"staleness": 4},
    "corruption_gradient": {"corruption_rate": 0.3},
    "corruption_activation": {"corruption_rate": 0.5, "corruption_target": "activation",
                              "corruption_magnitude": 1.0e6},
    "straggler": {"straggler_rate": 0.5},
}


@pytest.fixture(scope="module")
def fault_runs():
    from gpustack_sim.learning.config import LearnConfig
    from gpustack_sim.learning.corpus import load_corpus
    from gpustack_sim.learning.train import run_seed

    conditions = [{"id": "base", "replicas": 2, "local_steps": 1, "outer": {"method": "data_parallel"}}]
    conditions += [{"id": k.replace("_", "-"), "replicas": 2, "local_steps": 1, "outer": {"method": "data_parallel"},
                    "faults": f} for k, f in FAULTS.items()]
    cfg = LearnConfig.model_validate({
        "corpus": "x", "model": {"layers": 1, "d_model": 32, "heads": 2, "d_ff": 64, "context": 32},
        "train": {"batch": 4, "steps": 60, "lr": 0.01, "warmup": 4, "eval_every": 6, "eval_batches": 2,
                  "checkpoint_every": 8},
        "seeds": [0], "conditions": conditions})
    corpus = load_corpus(REPO / "data" / "corpus" / "devils_dictionary.txt", cfg.holdout_fraction, cfg.model.context)
    return {c.id: run_seed(cfg, corpus, c, 0) for c in cfg.conditions}


def _area(run) -> float:
    """Mean held-out loss over the curve after the first evaluation: how slowly the run learned."""
    return sum(p["loss"] for p in run.points[1:]) / (len(run.points) - 1)


@pytest.mark.parametrize("kind", sorted(FAULTS))
def test_each_fault_slows_learning(fault_runs, kind):
    base, run = fault_runs["base"], fault_runs[kind.replace("_", "-")]
    assert base.events == {"steps": 60, "rollbacks": 0, "lost_steps": 0, "replays": 0, "corruptions": 0,
                           "stragglers": 0, "outer_rounds": 0}
    assert run.points != base.points
    assert run.points[-1]["tokens"] == base.points[-1]["tokens"]  # the same token budget, wasted work included
    assert _area(run) > _area(base), (kind, _area(run), _area(base))
    if kind == "rollback":
        assert run.events["rollbacks"] > 0 and run.events["lost_steps"] > run.events["rollbacks"]
        assert run.points[-1]["useful_tokens"] < run.points[-1]["tokens"]
    elif kind == "replay":
        assert run.events["replays"] > 0 and run.events["steps"] + run.events["replays"] == base.events["steps"]
    elif kind.startswith("corruption"):
        assert run.events["corruptions"] > 0
    elif kind == "straggler":
        assert run.events["stragglers"] > 0


# ---- admissibility and the split ------------------------------------------------------------------

def test_admissibility_reasons(fault_runs):
    from gpustack_sim.learning.config import Admissibility, LearnConfig
    from gpustack_sim.learning.observe import admissibility

    cfg = LearnConfig.model_validate({
        "corpus": "x", "model": {"layers": 1, "d_model": 32, "heads": 2, "d_ff": 64, "context": 32},
        "train": {"batch": 4, "steps": 60, "lr": 0.01, "warmup": 4, "eval_every": 6, "checkpoint_every": 8},
        "seeds": [0], "admissibility": {"min_seeds": 1, "min_points": 8},
        "conditions": [{"id": "base", "replicas": 2, "local_steps": 1, "outer": {"method": "data_parallel"}}]})
    good = fault_runs["base"]
    assert admissibility(cfg, [good]) is None
    strict = cfg.model_copy(update={"admissibility": Admissibility(min_seeds=3, min_points=len(good.points) + 1)})
    reason = admissibility(strict, [good])
    assert "1 seed(s), the config requires 3" in reason and "sampling cadence" in reason
    # The rollback run at 10% never passes its first checkpoint often: its loss can end above where it began.
    from dataclasses import replace
    nan = replace(good, points=good.points[:-1] + [{**good.points[-1], "loss": math.nan}], diverged="loss not finite")
    assert "diverged" in admissibility(cfg, [nan])
    worse = replace(good, points=good.points[:-1] + [{**good.points[-1], "loss": good.initial_loss + 0.1}])
    assert "above its initial" in admissibility(cfg, [worse])


def test_split_is_a_rule_on_the_id():
    from gpustack_sim.learning.observe import split_of

    ids = [f"cond-{i}" for i in range(400)]
    first = [split_of(i, []) for i in ids]
    assert first == [split_of(i, []) for i in ids]
    assert 0.15 < first.count("evaluation") / len(ids) < 0.35
    calibration = next(i for i, s in zip(ids, first) if s == "calibration")
    assert split_of(calibration, [calibration]) == "evaluation"


def test_committed_calibration_observations_match_their_config():
    """The committed measurements: one row per condition of the calibration config, held-out conditions as
    evaluation data, every curve present and named by its hash."""
    import hashlib

    import yaml

    from gpustack_sim.engine.observation import load_observations
    from gpustack_sim.learning.observe import split_of

    cfg = yaml.safe_load(CALIBRATION.read_text())
    items = load_observations([REPO / "data" / "observations" / "local_learning.yaml"])
    assert [i.obs.learning.condition for i in items] == [c["id"] for c in cfg["conditions"]]
    for i in items:
        assert i.obs.split == split_of(i.obs.learning.condition, cfg["hold_out"])
        assert len(i.obs.learning.seeds) == len(cfg["seeds"])
        for rel in i.obs.learning.curves:
            path = i.file.parent / rel
            assert hashlib.sha256(path.read_bytes()).hexdigest() == path.stem
    assert {i.obs.learning.condition for i in items if i.obs.split == "evaluation"} >= set(cfg["hold_out"])


# ---- bad input -------------------------------------------------------------------------------------

GOOD = """corpus: {corpus}
model: {{layers: 1, d_model: 32, heads: 2, d_ff: 64, context: 32}}
train: {{batch: 4, steps: 8, lr: 0.01, warmup: 2, eval_every: 2, checkpoint_every: 4}}
seeds: [0]
conditions:
  - {{id: a, replicas: 2, local_steps: 2, outer: {{method: local_sgd}}}}
"""


@pytest.mark.parametrize("change, field", [
    (("local_steps: 2", "local_steps: 0"), "conditions[0].local_steps"),
    (("outer: {method: local_sgd}}", "outer: {method: local_sgd}, faults: {straggler_rate: -0.1}}"),
     "conditions[0].faults.straggler_rate"),
    (("train: {batch", "train: {optimizer: lion, batch"), "train.optimizer"),
    (("outer: {method: local_sgd}", "outer: {method: fedprox}"), "conditions[0].outer.method"),
    (("corpus: ", "corpus: missing-"), "corpus"),
    (("seeds: [0]", "seeds: [0]\nsurprise: 1"), "surprise"),
])
def test_bad_config_is_one_line_exit_2_nothing_written(tmp_path, change, field):
    corpus = (REPO / "data" / "corpus" / "devils_dictionary.txt").as_posix()
    text = GOOD.format(corpus=corpus).replace(*change)
    assert text != GOOD.format(corpus=corpus)
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    out = tmp_path / "out"
    result = run_cli_here("learn", str(path), "--out", str(out), "--plot", str(tmp_path / "p.png"))
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, result.stderr
    assert len(lines) == 1 and str(path) in lines[0] and field in lines[0], lines
    assert "Traceback" not in result.stderr
    assert not out.exists() and not (tmp_path / "p.png").exists()


def test_good_config_of_the_bad_config_tests_runs(tmp_path):
    """The config the bad-input tests break is itself valid: each of them fails for its one change."""
    path = tmp_path / "good.yaml"
    path.write_text(GOOD.format(corpus=(REPO / "data" / "corpus" / "devils_dictionary.txt").as_posix()))
    result = run_cli_here("learn", str(path), "--out", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "out" / "observations" / "local_learning.yaml").is_file()


# ---- reading measured curves back ------------------------------------------------------------------

def test_measured_curves_read_back_and_refusals(smoke, tmp_path):
    import hashlib
    import shutil

    from gpustack_compiler.base.errors import InputError
    from gpustack_sim.learning.curves import load_measured

    base, _, _ = smoke
    measured = load_measured(base / "a" / "observations" / "local_learning_smoke.yaml")
    assert {m.condition for m in measured} == {"dp-k2", "diloco-k2-h4"}
    for m in measured:
        assert len(m.curves) == 2 and m.mean("loss")[-1] == pytest.approx(m.value, rel=1e-5)
    with pytest.raises(InputError, match="has no `learning` setup"):
        load_measured(REPO / "data" / "observations" / "bekman_mamf.yaml")

    out = tmp_path / "copy"
    shutil.copytree(base / "a", out)
    obs = out / "observations" / "local_learning_smoke.yaml"
    first = sorted((out / "learning").glob("*.json"))[0]
    doc = json.loads(first.read_text())
    for p in doc["points"]:
        del p["flops"]
    body = (json.dumps(doc, sort_keys=True, separators=(",", ":")) + "\n").encode()
    digest = hashlib.sha256(body).hexdigest()
    (out / "learning" / f"{digest}.json").write_bytes(body)
    obs.write_text(obs.read_text().replace(first.stem, digest))
    with pytest.raises(InputError, match="lacks the series `flops`"):
        load_measured(obs)
    (out / "learning" / f"{digest}.json").write_bytes(body + b" ")
    with pytest.raises(InputError, match="changed since it was written"):
        load_measured(obs)
    (out / "learning" / f"{digest}.json").unlink()
    with pytest.raises(InputError, match="is missing"):
        load_measured(obs)


def test_committed_curve_is_reproduced_bit_for_bit():
    """One committed calibration curve (dp-k1, seed 0: a single replica, the cheapest) trained again from the
    committed config and code gives the committed bytes: the measurements are what this code measures."""
    import hashlib

    from gpustack_sim.engine.observation import load_observations
    from gpustack_sim.learning.config import load_config
    from gpustack_sim.learning.corpus import load_corpus
    from gpustack_sim.learning.observe import canonical, curve_document
    from gpustack_sim.learning.train import run_seed

    cfg, corpus_path = load_config(CALIBRATION)
    cond = next(c for c in cfg.conditions if c.id == "dp-k1")
    corpus = load_corpus(corpus_path, cfg.holdout_fraction, cfg.model.context)
    item = next(i for i in load_observations([REPO / "data" / "observations" / "local_learning.yaml"])
                if i.obs.learning.condition == "dp-k1")
    path = item.file.parent / item.obs.learning.curves[item.obs.learning.seeds.index(0)]
    run = run_seed(cfg, corpus, cond, 0)
    body = canonical(curve_document(run, cond, hashlib.sha256(CALIBRATION.read_bytes()).hexdigest(), corpus.sha256))
    assert body == path.read_bytes(), path


def test_without_jax_one_line_exit_3_nothing_written(tmp_path):
    """Without the `learn` extra the command says what to install (exit 3, the machine's problem), after
    having checked the config; a bad config is still a usage error without it."""
    import subprocess
    import sys

    def run(config: Path):
        code = ("import sys; sys.modules['jax'] = None\nfrom gpustack_sim.cli.main import main\n"
                f"sys.argv = ['gpustack', 'learn', {str(config)!r}, '--out', {str(tmp_path / 'out')!r}]; main()")
        return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)

    missing = run(SMOKE)
    assert missing.returncode == 3 and missing.stderr.strip().splitlines() == [
        'Error: the learning workload needs jax, which is not installed: python3 -m pip install -e ".[learn]"']
    bad = tmp_path / "bad.yaml"
    bad.write_text(SMOKE.read_text().replace("steps: 48", "steps: 0"))
    assert run(bad).returncode == 2
    assert not (tmp_path / "out").exists()
