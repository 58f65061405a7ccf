"""The sealed evaluation set: sealed once by hash, refused by validate unless --sealed, and never scored while
its seal is broken (gpustack_sim/engine/sealed.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from helpers import REPO, gp
from test_observations import NARAYANAN, entries, write

from gpustack_compiler.base.errors import InputError
from gpustack_sim.engine.observation import load_observations
from gpustack_sim.engine.sealed import LOCK_NAME, seal, seal_problems

SEALED = REPO / "data" / "sealed"


def test_the_repository_seal_holds_and_covers_every_sealed_row() -> None:
    assert seal_problems(SEALED) == []
    items = load_observations([SEALED])
    assert {i.obs.split for i in items} == {"evaluation"}
    # None of its runs is a row of the panels: its ids and its panels are its own.
    panels = {i.obs.panel for i in load_observations([REPO / "data" / "observations"])}
    assert not panels & {i.obs.panel for i in items}


def test_a_seal_is_written_once_and_breaks_on_any_change(tmp_path: Path) -> None:
    folder = tmp_path / "sealed"
    folder.mkdir()
    first, second = entries(NARAYANAN)[:2]
    path = write(folder / "a.yaml", first)
    assert seal(folder) == ["narayanan2021-t1-gpt-1.7b"]
    assert seal_problems(folder) == []
    with pytest.raises(InputError, match="already sealed"):
        seal(folder)
    write(path, first, second)
    problems = seal_problems(folder)
    assert len(problems) == 1 and problems[0].startswith(f"{path}:")
    assert problems[0].endswith("observation `narayanan2021-t1-gpt-3.6b` was added after the set was sealed")
    write(path, first.replace("value: 137.0", "value: 137.2"))
    assert "changed since it was locked" in seal_problems(folder)[0]
    path.unlink()
    (folder / LOCK_NAME).unlink()
    with pytest.raises(InputError, match="no observation files"):
        seal(folder)


def test_validate_refuses_sealed_rows_without_the_flag_and_other_rows_with_it(build: Path,
                                                                               tmp_path: Path) -> None:
    copy = tmp_path / "copy.yaml"
    shutil.copy(SEALED / "mcore_moe_qwen3_h100.yaml", copy)
    for args, n in ((["validate", str(SEALED)], 60), (["validate", str(copy)], 5)):
        res = gp(build, *args)
        assert res.returncode == 2 and "Traceback" not in res.stderr
        assert f"validate refuses {n} sealed observation(s)" in res.stderr and "--sealed" in res.stderr
    res = gp(build, "validate", "--sealed", str(REPO / "data" / "observations" / "narayanan2021_table1.yaml"))
    assert res.returncode == 2 and "--sealed scores the sealed set alone" in res.stderr


def test_validate_sealed_scores_a_sealed_set_with_the_panels_as_its_pool(build: Path, tmp_path: Path,
                                                                          monkeypatch) -> None:
    # A workspace of its own: one panel in data/observations, and a sealed set beside it made of another
    # panel already scored in the repository (the MT-NLG rows), so no sealed row of the repository is scored.
    (tmp_path / "data" / "observations").mkdir(parents=True)
    (tmp_path / "data" / "sealed").mkdir()
    shutil.copy(NARAYANAN, tmp_path / "data" / "observations")
    sealed = tmp_path / "data" / "sealed" / "mtnlg.yaml"
    shutil.copy(REPO / "data" / "observations" / "smith2022_mtnlg.yaml", sealed)
    monkeypatch.chdir(tmp_path)
    res = gp(build, "validate", "--sealed", "--json")
    assert res.returncode == 2 and "has no sealed.lock" in res.stderr
    assert gp(build, "observations", "seal").returncode == 0
    res = gp(build, "validate", "--sealed", "--samples", "2", "--json")
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert set(data["panels"]) == {"smith2022_mtnlg_throughput"}
    for row in data["rows"]:
        # The term comes from the one panel of data/observations: ten A100 rows.
        assert row["model_form"]["90%"]["n"] == 10 and "training/a100/dense" in row["model_form"]["90%"]["reason"]
    assert gp(build, "validate", "--samples", "2").returncode == 0  # the panels alone, without the sealed set
    sealed.write_text(sealed.read_text().replace("low: 60.05, high: 60.15", "low: 60.0, high: 60.2", 1))
    res = gp(build, "validate", "--sealed")
    assert res.returncode == 2 and "changed since it was locked" in res.stderr
