"""`gpustack diff` on a temporary git repository holding a copy of the catalog and run files, with three
known edits in the work tree: an added relation (and its variable), a changed unit, a changed preset value."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from gpustack_compiler.base.errors import InputError
from gpustack_sim import Engine

ROOT = Path(__file__).resolve().parent.parent
ADDED = """\
# yaml-language-server: $schema=../../schemas/system.schema.json
variables:
  - name: training.t_step_hours
    units: hour
    description: The step time in hours (a test entry).
    assumptions: [positive]
    references: [narayanan2021_megatron]
relations:
  - name: training.t_step_hours.same
    kind: identity
    defines: training.t_step_hours
    expression: training.t_step
    description: The same time in another unit.
    references: [narayanan2021_megatron]
"""


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    repo = tmp_path_factory.mktemp("diff") / "repo"
    shutil.copytree(ROOT / "catalog", repo / "catalog")
    shutil.copytree(ROOT / "runs", repo / "runs")
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", "-A")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@example.org", "commit", "-qm", "base")
    (repo / "catalog" / "training" / "extra.yaml").write_text(ADDED)
    step = repo / "catalog" / "training" / "step.yaml"
    text = step.read_text()
    old = "  - name: training.t_compute\n    units: s\n"
    assert old in text
    step.write_text(text.replace(old, "  - name: training.t_compute\n    units: ms\n"))
    tariffs = repo / "catalog" / "presets" / "tariffs.yaml"
    text = tariffs.read_text()
    assert text.count("value: 8.06, units: cent/kWh") == 2
    tariffs.write_text(text.replace("value: 8.06, units: cent/kWh", "value: 16.12, units: cent/kWh"))
    return repo


@pytest.fixture(scope="module")
def diff(repo):
    return Engine.diff(repo / "catalog", "main")


def test_entries_added_and_changed(diff):
    got = {(c.kind, c.name, c.status) for c in diff.changes}
    assert got == {("variables", "training.t_step_hours", "added"), ("relations", "training.t_step_hours.same", "added"),
                   ("variables", "training.t_compute", "changed"), ("presets", "us_industrial_electricity_2023", "changed")}
    unit = next(c for c in diff.changes if c.name == "training.t_compute")
    assert unit.fields == {"units": ("s", "ms")}  # same dimension, so only the unit
    assert unit.file == "catalog/training/step.yaml" and unit.line > 0
    preset = next(c for c in diff.changes if c.kind == "presets")
    before, after = preset.fields["assignments"]
    assert before["econ.power.price_kwh_peak"]["value"] == 8.06 and after["econ.power.price_kwh_peak"]["value"] == 16.12


def test_blast_radius(diff, repo):
    import networkx as nx

    from gpustack_compiler.manifest.graph import V
    from gpustack_compiler.manifest.serialise import graph_of
    from gpustack_sim import Engine

    # The oracle, straight from the data-flow graph: what the edits touch, everything downstream of it, and
    # each headline target's ancestors.
    flow = graph_of(Engine.compile(repo / "catalog", build_dir=None).manifest).flow
    touched = {"training.t_compute", "econ.power.price_kwh_peak", "econ.power.price_kwh_offpeak", "training.t_step_hours"}
    reached = {n for t in touched for n in nx.descendants(flow, V + t) | {V + t} if n.startswith(V)}
    assert diff.reached == len(reached)
    for target, count in diff.blast.items():
        cone = {n for n in nx.ancestors(flow, V + target) if n.startswith(V)} | {V + target}
        assert count == len(cone & reached), target
    assert diff.blast["training.t_step"] >= 3  # t_compute, t_step_core, t_step at least
    # The price joins the cost's cone, not the step time's; the added variable is in no headline cone.
    assert diff.blast["econ.cost.per_token"] > diff.blast["training.t_step"]
    assert diff.reached > max(diff.blast.values())


def test_value_deltas_of_the_runs(diff):
    llama = next(r for r in diff.runs if r.run == "runs/llama70b_1024xh100.yaml")
    figs = {f.label: f for f in llama.figures}
    # Doubling the price doubles the energy cost; a display unit never changes a value.
    assert figs["power cost"].percent == pytest.approx(100, rel=1e-9)
    assert figs["step time"].before == figs["step time"].after
    assert figs["total cost"].after - figs["total cost"].before == pytest.approx(figs["power cost"].before, rel=1e-9)
    assert llama.moved[0].label == "power cost"
    assert "step time" not in [f.label for f in llama.moved]


def test_formats(diff):
    from gpustack_sim.cli.diff import github, markdown, text

    md = markdown(diff)
    assert "| changed | variable | `training.t_compute` | units: s -> ms |" in md
    assert "| power cost |" in md and "+100%" in md
    gh = github(diff).splitlines()
    assert any(line.startswith("::notice file=catalog/training/step.yaml,line=") and "training.t_compute" in line
               for line in gh)
    assert "added    relation  training.t_step_hours.same" in text(diff)


def test_cli(repo):
    def run(*args):
        return subprocess.run(["python3", "-c", "from gpustack_sim.cli.main import main; main()", "--catalog",
                               str(repo / "catalog"), "diff", *args], capture_output=True, text=True, cwd=repo,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})

    done = run("--base", "main", "--format", "json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert {c["name"] for c in data["changes"]} >= {"training.t_compute", "training.t_step_hours.same"}
    llama = next(r for r in data["runs"] if r["run"] == "runs/llama70b_1024xh100.yaml")
    assert llama["moved_most"][0] == "power cost"
    bad = run("--base", "no-such-ref")
    assert bad.returncode == 2
    assert bad.stderr.count("\n") == 1 and bad.stderr.startswith("Error: --base no-such-ref")


def test_not_a_repository(tmp_path):
    shutil.copytree(ROOT / "catalog" / "presets", tmp_path / "catalog")
    with pytest.raises(InputError, match="git"):
        Engine.diff(tmp_path / "catalog")
