"""Observations and the research score: the data model and its lock, splits that cannot leak, rows that do
not resolve, and every scoring statistic against values computed by hand."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from helpers import REPO, gp

from gpustack_compiler.base.errors import InputError
from gpustack_compiler.build import schema as schema_mod
from gpustack_sim import Engine
from gpustack_sim.analyses import scoring
from gpustack_sim.engine.observation import LOCK_NAME, load_observations, lock_problems, read_lock, update_lock

OBSERVATIONS = REPO / "data" / "observations"
NARAYANAN = OBSERVATIONS / "narayanan2021_table1.yaml"
KORTHIKANTI = OBSERVATIONS / "korthikanti2022_table5.yaml"


def entries(path: Path) -> list[str]:
    """An observation file's entries as text blocks, so a test can copy one and change it."""
    text = path.read_text()
    body = text[text.index("observations:\n") + len("observations:\n"):]
    return ["  - id:" + b for b in body.split("  - id:")[1:]]


def write(path: Path, *blocks: str) -> Path:
    path.write_text("observations:\n" + "".join(blocks))
    return path


# ---- scoring, by hand --------------------------------------------------------------------------------

def test_errors_by_hand() -> None:
    # relative errors +10%, -20%, 0: MAPE 10%, max 20%, bias -10/3 %
    e = scoring.errors([110, 80, 50], [100, 100, 50])
    assert e["mape"] == pytest.approx(0.1) and e["max_abs_error"] == pytest.approx(0.2)
    assert e["bias"] == pytest.approx(-0.1 / 3)


def test_spearman_by_hand() -> None:
    assert scoring.spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert scoring.spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    # ranks a = 1, 2, 3, 4; b = 1, 3, 2, 4: 1 - 6 * 2 / (4 * 15) = 0.8
    assert scoring.spearman([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(0.8)
    # ties share the average rank: b = 1, 2.5, 2.5, 4; Pearson of ranks = 4.5 / sqrt(5 * 4.5)
    assert scoring.spearman([1, 2, 3, 4], [1, 2, 2, 4]) == pytest.approx(4.5 / math.sqrt(22.5))
    # and do not depend on row order
    assert scoring.spearman([2, 1, 3, 4], [2, 1, 2, 4]) == scoring.spearman([1, 2, 3, 4], [1, 2, 2, 4])
    assert scoring.spearman([1], [1]) is None and scoring.spearman([1, 2], [3, 3]) is None


def test_kendall_tau_b_by_hand() -> None:
    assert scoring.kendall_tau_b([1, 2, 3], [1, 2, 3]) == pytest.approx(1.0)
    # pairs of (1,2,3) vs (1,3,2): concordant 2, discordant 1 -> 1/3
    assert scoring.kendall_tau_b([1, 2, 3], [1, 3, 2]) == pytest.approx(1 / 3)
    # a = 1, 2, 3, 4; b = 1, 2, 2, 3: concordant 5, discordant 0, one tie in b: 5 / sqrt(6 * 5)
    assert scoring.kendall_tau_b([1, 2, 3, 4], [1, 2, 2, 3]) == pytest.approx(5 / math.sqrt(30))
    assert scoring.kendall_tau_b([1, 2], [5, 5]) is None


def test_coverage_is_per_panel_and_level() -> None:
    rows = [scoring.Scored("a", 10, 11, {0.9: (9, 12), 0.5: (10.5, 11.5)}),
            scoring.Scored("a", 20, 15, {0.9: (14, 19), 0.5: (14.5, 15.5)}),
            scoring.Scored("b", 5, 5, {0.9: (4, 6)}),
            scoring.Scored("b", 7, 7, {})]  # no interval: counts towards no level
    cov = scoring.coverage(rows)
    assert set(cov) == {"a", "b"}
    assert cov["a"][0.9].to_dict() == {"covered": 1, "n": 2, "fraction": 0.5}
    assert cov["a"][0.5].to_dict() == {"covered": 0, "n": 2, "fraction": 0.0}
    assert cov["b"][0.9].to_dict() == {"covered": 1, "n": 1, "fraction": 1.0} and 0.5 not in cov["b"]


def test_decision_regret_by_hand() -> None:
    # throughput: the model ranks B first (predicted 120), the best measured is A (100): (100 - 90) / 100
    r = scoring.decision_regret("g", {"A": (100, 110), "B": (90, 120), "C": (80, 70)}, "higher")
    assert (r.chosen, r.best) == ("B", "A") and r.regret == pytest.approx(0.10)
    # time per step: the model picks B (predicted 1.0 s), A is fastest (2.0 s measured): 1 - 2.0 / 2.5
    r = scoring.decision_regret("g", {"A": (2.0, 1.5), "B": (2.5, 1.0)}, "lower")
    assert (r.chosen, r.best) == ("B", "A") and r.regret == pytest.approx(0.2)
    assert scoring.decision_regret("g", {"A": (2.0, 1.0), "B": (2.5, 2.0)}, "lower").regret == 0
    with pytest.raises(ValueError):
        scoring.decision_regret("g", {"A": (1.0, 1.0)}, "higher")


def test_aggregate_replicates_by_hand() -> None:
    a = scoring.aggregate([10, 12, 14], [9.5, 11.5, 13.5], [10.5, 12.5, 14.5])
    assert (a.value, a.low, a.high, a.n) == (12, 9.5, 14.5, 3) and a.sd == pytest.approx(2.0)
    assert scoring.aggregate([5], [4], [6]).sd is None


# ---- the data ------------------------------------------------------------------------------------------

def test_every_observation_matches_the_lock() -> None:
    items = load_observations([OBSERVATIONS])
    lock = read_lock(OBSERVATIONS.parent / LOCK_NAME)
    assert lock_problems(items, lock) == []
    assert sorted(i.obs.id for i in items) == sorted(lock)
    assert {i.obs.split for i in items} == {"calibration", "evaluation"}


def test_a_changed_observation_needs_a_new_id(tmp_path: Path) -> None:
    first = entries(NARAYANAN)[0]
    path = write(tmp_path / "obs.yaml", first)
    lock = tmp_path / LOCK_NAME
    assert update_lock(lock, load_observations([path])) == ["narayanan2021-t1-gpt-1.7b"]
    write(path, first.replace("value: 137.0", "value: 137.2"))
    with pytest.raises(InputError, match="changed since it was locked"):
        update_lock(lock, load_observations([path]))
    write(path, first.replace("value: 137.0", "value: 137.2").replace("gpt-1.7b\n", "gpt-1.7b-v2\n", 1))
    assert "is in the lock but in no observation file" in lock_problems(load_observations([path]),
                                                                        read_lock(lock))[0]


def test_observation_schema_is_generated_and_fresh() -> None:
    assert "observations.schema.json" in schema_mod.SCHEMA_FILES
    assert schema_mod.stale(REPO / "schemas") == []


@pytest.mark.parametrize("change,message", [
    (("    split: evaluation\n", ""), "observations[0].split: Field required"),
    (("uncertainty: {kind: rounding, low: 136.5", "uncertainty: {kind: rounding, low: 137.5"),
     "the value must lie within its uncertainty"),
    (("      reference: narayanan2021_megatron\n", "      reference: narayanan2021_megatron\n      page: 6\n"),
     "observations[0].source.page: Extra inputs are not permitted"),
    (("{field: layout.micro_batch,", "{field: layoutt.micro_batch,"), "is not a field of the run"),
    (("reference: narayanan2021_megatron", "reference: narayanan2021"), "source.reference: `narayanan2021` is not a key"),
    (("flop_convention: megatron_recompute", "flop_convention: model"),
     "training.achieved_flops_megatron counts FLOPs by the megatron_recompute convention"),
])
def test_bad_observation_files_are_one_line(build: Path, tmp_path: Path, change, message) -> None:
    path = write(tmp_path / "bad.yaml", entries(NARAYANAN)[0].replace(*change, 1))
    res = gp(build, "validate", str(path))
    assert res.returncode == 2 and "Traceback" not in res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"Error: {path}:") and message in lines[0], res.stderr


# ---- splits that cannot leak ---------------------------------------------------------------------------

def test_validate_refuses_calibration_observations(build: Path) -> None:
    res = gp(build, "validate", str(KORTHIKANTI), str(NARAYANAN))
    assert res.returncode == 2
    assert "validate takes evaluation observations only; 8 given are calibration data" in res.stderr
    assert "korthikanti2022-t5-megatron-22b-full" in res.stderr


def test_calibrate_refuses_evaluation_observations(build: Path, tmp_path: Path) -> None:
    res = gp(build, "calibrate", str(KORTHIKANTI), str(NARAYANAN), "--out", str(tmp_path / "c.yaml"))
    assert res.returncode == 2 and not (tmp_path / "c.yaml").exists()
    assert "calibrate takes calibration observations only; 10 given are evaluation data" in res.stderr
    assert "narayanan2021-t1-gpt-1.7b" in res.stderr


def test_validate_refuses_what_the_active_calibration_was_fitted_to(engine: Engine, tmp_path: Path) -> None:
    # A calibration fitted to an observation (by whatever route) makes that observation unfit to grade it.
    path = write(tmp_path / "obs.yaml", entries(NARAYANAN)[0])
    fit = engine.scenarios.presets["calibration"]["fit"]
    before = list(fit["observations"])
    fit["observations"] = [*before, "narayanan2021-t1-gpt-1.7b"]
    try:
        with pytest.raises(InputError, match=r"refuses 1 observation\(s\) the active calibration was fitted to: "
                                             "narayanan2021-t1-gpt-1.7b"):
            engine.validate(path, samples=10)
    finally:
        fit["observations"] = before
    assert "korthikanti2022-t5-megatron-22b-full" in before  # the committed calibration lists its ids


# ---- every row attempted -------------------------------------------------------------------------------

def test_a_row_that_does_not_resolve_is_reported_and_the_others_score(engine: Engine, tmp_path: Path) -> None:
    good, other, third = entries(NARAYANAN)[:3]
    tpu = other.replace("hardware: [gpu_a100_sxm, dgx_a100_node, infiniband_hdr_fat_tree]", "hardware: [tpu_v9]")
    unknown = third.replace("{variable: training.achieved_flops_megatron, flop_convention: megatron_recompute}",
                            "{variable: training.goodput_per_watt}")
    result = engine.validate(write(tmp_path / "obs.yaml", good, tpu, unknown), samples=50)
    assert [r["id"] for r in result.rows] == ["narayanan2021-t1-gpt-1.7b"]
    assert [(u["id"], u["reason"]) for u in result.unresolved] == [
        ("narayanan2021-t1-gpt-3.6b", "unknown preset `tpu_v9`"),
        ("narayanan2021-t1-gpt-7.5b", "the catalog has no variable `training.goodput_per_watt`")]
    panel = result.panels["narayanan2021_table1"]
    assert panel["n"] == 1 and panel["unresolved"] == 2 and panel["spearman"] is None


def test_h100_rows_resolve_and_assign_overrides_a_derived_value(build: Path, tmp_path: Path) -> None:
    # The case: an H100 row once needed the cable length its paper does not give. The NDR fat-tree
    # preset now bounds the length per cable (and the L2 bytes per clock comes sourced with gpu_h100_sxm);
    # --assign still overrides the derived total for every row.
    llama = OBSERVATIONS / "dubey2024_table4.yaml"
    first = write(tmp_path / "llama.yaml", entries(llama)[0])
    predicted = {}
    for extra in ([], ["--assign", "link.inter.cable_length=0 m"]):
        res = gp(build, "validate", str(first), "--json", "--samples", "50", *extra)
        assert res.returncode == 0, res.stderr
        val = json.loads(res.stdout)
        assert val["unresolved"] == [] and val["rows"][0]["target"] == "training.mfu"
        predicted[bool(extra)] = val["rows"][0]["predicted"]
    assert 0 < predicted[False] < predicted[True] < 1  # no time of flight: a shorter step
    res = gp(build, "validate", str(first), "--preset", "no_such_preset")
    assert res.returncode == 2 and "unknown preset `no_such_preset`" in res.stderr


def test_replicates_score_once_and_decisions_give_regret(engine: Engine, tmp_path: Path) -> None:
    # Two evaluation copies of Korthikanti's 22B rows: the same full-recompute run twice (replicates) and the
    # selective layout of the same model (a decision between the two).
    full, selective = entries(KORTHIKANTI)[:2]
    full = full.replace("split: calibration", "split: evaluation")
    selective = selective.replace("split: calibration", "split: evaluation")
    replicate = full.replace("megatron-22b-full\n", "megatron-22b-full-again\n", 1).replace(
        "value: 1.42, units: \"s\", uncertainty: {kind: rounding, low: 1.415, high: 1.425}",
        "value: 1.46, units: \"s\", uncertainty: {kind: rounding, low: 1.455, high: 1.465}")
    blocks = [b.replace("korthikanti2022-t5-", "copy-") for b in (full, replicate, selective)]
    result = engine.validate(write(tmp_path / "obs.yaml", *blocks), samples=50)
    ids = [r["id"] for r in result.rows]
    assert ids == ["copy-megatron-22b-full+copy-megatron-22b-full-again", "copy-megatron-22b-selective"]
    merged = result.rows[0]
    assert merged["measured"] == pytest.approx(1.44) and (merged["measured_low"], merged["measured_high"]) == (
        1.415, 1.465)
    (decision,) = result.panels["korthikanti2022_table5"]["decisions"]
    chosen = min(result.rows, key=lambda r: r["predicted"])["id"]
    fastest = min(result.rows, key=lambda r: r["measured"])
    assert decision["best"] == fastest["id"] and decision["chosen"] == chosen
    assert decision["regret"] == pytest.approx(
        1 - fastest["measured"] / next(r["measured"] for r in result.rows if r["id"] == chosen))


def test_validate_result_is_typed_and_the_plot_deterministic(engine: Engine, tmp_path: Path) -> None:
    from gpustack_sim.analyses.validate import Validation, plot

    result = engine.validate(write(tmp_path / "obs.yaml", *entries(NARAYANAN)[:3]), samples=50)
    assert isinstance(result, Validation) and set(result.to_dict()) == {
        "sources", "calibration", "panels", "overall", "rows", "unresolved", "superseded"}
    plot(result, tmp_path / "a.png")
    plot(result, tmp_path / "b.png")
    data = (tmp_path / "a.png").read_bytes()
    assert data.startswith(b"\x89PNG") and data == (tmp_path / "b.png").read_bytes()
