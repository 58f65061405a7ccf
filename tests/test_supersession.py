"""Superseding an observation: the old one stays (in its file and in the lock), a new one names it in
`supersedes`, and calibration, validation and listings skip the old one and say how many they skipped. A
successor must name an id that exists, once, in its own split, without cycles; a problem is one line
naming the file and line."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import REPO, gp

from gpustack_compiler.base.errors import InputError
from gpustack_sim import Engine
from gpustack_sim.engine.observation import (
    LOCK_NAME,
    in_force,
    load_observations,
    lock_problems,
    read_lock,
    update_lock,
)

OBSERVATIONS = REPO / "data" / "observations"
AZURE = OBSERVATIONS / "azure_components.yaml"
NARAYANAN = OBSERVATIONS / "narayanan2021_table1.yaml"


def entry(path: Path, oid: str) -> str:
    """One observation of a file as its text block."""
    text = path.read_text()
    body = text[text.index("observations:\n") + len("observations:\n"):]
    blocks = ["  - id:" + b for b in body.split("  - id:")[1:]]
    (block,) = [b for b in blocks if b.startswith(f"  - id: {oid}\n")]
    # Keep the observation's own lines (a block may end with the comment that heads the next ones).
    return "".join(line for line in block.splitlines(keepends=True) if line.startswith("  - id:")
                   or line.startswith("    "))


def successor(block: str, old: str, new: str, value: str | None = None) -> str:
    """A copy of `block` under id `new` that supersedes `old`, with another measured value if given."""
    out = block.replace(f"  - id: {old}\n", f"  - id: {new}\n    supersedes: {old}\n", 1)
    if value is not None:
        out = out.replace("value: 1.7, units: TB/s, uncertainty: {kind: rounding, low: 1.695, high: 1.705}",
                          f"value: {value}, units: TB/s, uncertainty: {{kind: rounding, low: {value}, high: {value}}}")
    return out


def write(path: Path, *blocks: str) -> Path:
    path.write_text("observations:\n" + "".join(blocks))
    return path


TRIAD = "azure-a100-hbm-triad"


def test_a_superseded_row_is_skipped_by_the_fit(engine: Engine, tmp_path: Path) -> None:
    old = entry(AZURE, TRIAD)
    path = write(tmp_path / "obs.yaml", old, successor(old, TRIAD, f"{TRIAD}-v2", "1.5"))
    (cal,) = engine.calibrate_components(path)
    assert cal.skipped == [TRIAD] and cal.observations == [f"{TRIAD}-v2"]
    assert [r["id"] for r in cal.rows] == [f"{TRIAD}-v2"]
    assert cal.rows[0]["measured"] == pytest.approx(1.5e12)  # in B/s: the successor's 1.5 TB/s, not the old 1.7
    assert cal.rows[0]["predicted"] == pytest.approx(1.5e12, rel=1e-6)  # one unknown, one measurement
    assert cal.to_dict()["superseded_skipped"] == [TRIAD]


def test_calibrate_says_how_many_it_skipped(build: Path, tmp_path: Path) -> None:
    old = entry(AZURE, TRIAD)
    path = write(tmp_path / "obs.yaml", old, successor(old, TRIAD, f"{TRIAD}-v2", "1.5"))
    res = gp(build, "calibrate", "--components", str(path), "--out", str(tmp_path / "fit"))
    assert res.returncode == 0, res.stderr
    assert f"skipped 1 superseded observation(s): {TRIAD}" in res.stdout
    listing = gp(build, "observations", "list", str(path))
    assert listing.returncode == 0, listing.stderr
    assert f"[superseded by {TRIAD}-v2]" in listing.stdout and "2 observations, 1 superseded" in listing.stdout


def test_validate_skips_a_superseded_row_and_says_so(engine: Engine, tmp_path: Path) -> None:
    oid = "narayanan2021-t1-gpt-1.7b"
    old = entry(NARAYANAN, oid)
    path = write(tmp_path / "obs.yaml", old, successor(old, oid, f"{oid}-v2"))
    result = engine.validate(path, samples=50)
    assert [r["id"] for r in result.rows] == [f"{oid}-v2"]
    assert result.superseded == [{"id": oid, "panel": "narayanan2021_table1", "where": f"{path}:2",
                                  "superseded_by": f"{oid}-v2"}]


def test_the_old_row_stays_in_the_lock(tmp_path: Path) -> None:
    old = entry(AZURE, TRIAD)
    path = write(tmp_path / "obs.yaml", old)
    lock = tmp_path / LOCK_NAME
    assert update_lock(lock, load_observations([path])) == [TRIAD]
    write(path, old, successor(old, TRIAD, f"{TRIAD}-v2", "1.5"))
    assert update_lock(lock, load_observations([path])) == [f"{TRIAD}-v2"]
    items = load_observations([path])
    assert lock_problems(items, read_lock(lock)) == []
    kept, gone = in_force(items)
    assert [i.obs.id for i in kept] == [f"{TRIAD}-v2"] and [i.obs.id for i in gone] == [TRIAD]


def test_a_chain_of_successors_leaves_the_last_in_force(tmp_path: Path) -> None:
    old = entry(AZURE, TRIAD)
    v2 = successor(old, TRIAD, f"{TRIAD}-v2", "1.6")
    v3 = successor(v2.replace(f"    supersedes: {TRIAD}\n", ""), f"{TRIAD}-v2", f"{TRIAD}-v3", "1.5")
    kept, gone = in_force(load_observations([write(tmp_path / "obs.yaml", old, v2, v3)]))
    assert [i.obs.id for i in kept] == [f"{TRIAD}-v3"] and len(gone) == 2


@pytest.mark.parametrize("case,message", [
    ("missing", "supersedes: no observation `azure-a100-hbm-triad-v0` among those loaded"),
    ("twice", "supersedes: observation `azure-a100-hbm-triad` is already superseded by `azure-a100-hbm-triad-v2`"),
    ("itself", "supersedes: observation `azure-a100-hbm-triad-v2` cannot supersede itself"),
])
def test_a_bad_supersession_is_one_line_naming_file_and_line(build: Path, tmp_path: Path, case: str,
                                                               message: str) -> None:
    old = entry(AZURE, TRIAD)
    v2 = successor(old, TRIAD, f"{TRIAD}-v2", "1.5")
    blocks = {"missing": [old, v2.replace(f"supersedes: {TRIAD}\n", f"supersedes: {TRIAD}-v0\n")],
              "twice": [old, v2, successor(old, TRIAD, f"{TRIAD}-v3", "1.6")],
              "itself": [old, v2.replace(f"supersedes: {TRIAD}\n", f"supersedes: {TRIAD}-v2\n")]}[case]
    path = write(tmp_path / "obs.yaml", *blocks)
    line = 2 + sum(b.count("\n") for b in blocks[:-1])  # the last block's `- id:` line, where it is wrong
    res = gp(build, "calibrate", "--components", str(path), "--out", str(tmp_path / "fit"))
    assert res.returncode == 2 and "Traceback" not in res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"Error: {path}:{line}: ") and message in lines[0], res.stderr
    assert not (tmp_path / "fit").exists()


def test_a_cycle_or_a_change_of_split_is_refused(tmp_path: Path) -> None:
    old = entry(AZURE, TRIAD)
    v2 = successor(old, TRIAD, f"{TRIAD}-v2", "1.5")
    cycle = old.replace(f"  - id: {TRIAD}\n", f"  - id: {TRIAD}\n    supersedes: {TRIAD}-v2\n", 1)
    with pytest.raises(InputError, match="a cycle leaves none of them in force"):
        load_observations([write(tmp_path / "cycle.yaml", cycle, v2)])
    oid = "narayanan2021-t1-gpt-1.7b"
    evaluation = entry(NARAYANAN, oid)
    calibration = successor(evaluation, oid, f"{oid}-v2").replace("split: evaluation", "split: calibration", 1)
    with pytest.raises(InputError, match="a successor keeps its predecessor's split"):
        load_observations([write(tmp_path / "split.yaml", evaluation, calibration)])


def test_the_shipped_successors_restate_every_attention_benchmark() -> None:
    items = load_observations([OBSERVATIONS])
    kept, gone = in_force(items)
    attention = [i for i in kept if i.obs.measures.variable == "kernel.attn.achieved_flops"]
    restated = [i for i in gone if i.obs.measures.variable == "kernel.attn.achieved_flops"]
    successors = [i for i in attention if i.obs.supersedes]
    assert len(successors) == 74 and len(restated) == 74
    # rows added after the restatement state the mask from the start (MI300X's FlashAttention-2 row, the 30 cuDNN
    # bars of stop 31)
    fresh = {i.obs.id for i in attention} - {i.obs.id for i in successors}
    cudnn = {i for i in fresh if i.startswith("shah2024-fig5-cudnn-")}
    assert len(cudnn) == 30 and fresh - cudnn == {"azure-mi300x-flash-attention2-hd64-s8192"}
    assert all("arch.attn.causal" in i.obs.component.assign for i in attention)
    for i in attention:
        assert i.obs.component.assign["arch.attn.causal"] == (1 if "-causal-" in i.obs.id else 0), i.obs.id
