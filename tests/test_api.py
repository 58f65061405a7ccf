"""The engine as a library: the documented example runs, and importing it pulls in no command line."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from helpers import REPO, mini_catalog

from gpustack_compiler.base.errors import CatalogError, InputError
from gpustack_sim import Engine

DOC = REPO / "docs" / "api.md"


def test_import_pulls_in_no_command_line() -> None:
    code = ("import sys, gpustack_sim; from gpustack_sim import Engine; import gpustack_sim.analyses.estimate; "
            "print(sorted(m for m in ('typer', 'click', 'typer._click') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout.strip() == "[]"


def test_the_documented_example_runs(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
    assert blocks
    monkeypatch.chdir(REPO)
    exec(compile("\n".join(blocks), str(DOC), "exec"), {})
    printed = capsys.readouterr().out
    assert "step time" in printed and "layouts valid" in printed


def test_results_are_typed_and_serialise(tmp_path) -> None:
    engine = Engine.open(mini_catalog(tmp_path), build_dir=None)
    res = engine.resolve("training.t_step", engine.scenario(assign={"training.t_compute": "2 s",
                                                                    "training.t_comm": "500 ms"}))
    assert res.value == pytest.approx(2.5) and res.to_dict()["value"] == pytest.approx(2.5)


def test_domain_errors_not_command_line_errors(tmp_path) -> None:
    engine = Engine.open(mini_catalog(tmp_path), build_dir=None)
    with pytest.raises(InputError, match="unknown variable `training.t_stp`") as exc:
        engine.resolve("training.t_stp")
    assert "training.t_step" in (exc.value.hint or "")
    (tmp_path / "b").mkdir()
    broken = mini_catalog(tmp_path / "b")
    (broken / "training" / "step.yaml").write_text("variables: [1]\n")
    with pytest.raises(CatalogError) as exc:
        Engine.open(broken, build_dir=None)
    assert exc.value.findings.errors


def test_a_manifest_file_opens_and_another_schema_version_is_refused(tmp_path) -> None:
    import json

    from gpustack_compiler.build import pipeline

    pipeline.run(mini_catalog(tmp_path), tmp_path / "build", write_manifest=True)
    path = tmp_path / "build" / "manifest.json"
    engine = Engine.from_manifest(path)
    assert engine.tables.headline_targets == ("training.t_step",)
    old = json.loads(path.read_text())
    old["schema_version"] = "0.9"
    path.write_text(json.dumps(old))
    with pytest.raises(CatalogError, match=r"manifest schema 0.9 is not 1\.\d"):
        Engine.from_manifest(path)
    with pytest.raises(CatalogError, match="no manifest"):
        Engine.from_manifest(tmp_path / "nowhere.json")
