"""`gpustack experiment` and `gpustack check` as a user runs them: bad protocols and edited frozen
protocols give one `Error:` line (exit 2) naming file:line or the differing fields, and write nothing."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def gpustack(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    """The command line in a fresh process, as a user runs it."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("GPUSTACK_EXPERIMENTS", None)
    return subprocess.run([sys.executable, "-c", "from gpustack_sim.cli.main import main; main()", *args],
                          capture_output=True, text=True, env=env, cwd=cwd, timeout=120)


@pytest.fixture
def cli(monkeypatch, capsys):
    """The same entry point in this process (the imports are already paid for): (exit code, stdout, stderr)."""
    from gpustack_sim.cli.main import main

    monkeypatch.delenv("GPUSTACK_EXPERIMENTS", raising=False)

    def call(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
        monkeypatch.chdir(cwd)
        monkeypatch.setattr(sys, "argv", ["gpustack", *args])
        capsys.readouterr()
        with pytest.raises(SystemExit) as exc:
            main()
        got = capsys.readouterr()
        return subprocess.CompletedProcess(args, exc.value.code, got.out, got.err)

    return call


def _copy(tmp_path: Path) -> Path:
    """A repository copy with the catalog, the run file, the frozen protocols and their lock."""
    shutil.copytree(REPO / "catalog", tmp_path / "catalog")
    shutil.copytree(REPO / "runs", tmp_path / "runs")
    (tmp_path / "experiments").mkdir()
    shutil.copytree(REPO / "experiments" / "protocols", tmp_path / "experiments" / "protocols")
    shutil.copytree(REPO / "experiments" / "sites", tmp_path / "experiments" / "sites")
    shutil.copy(REPO / "experiments" / "protocols.lock", tmp_path / "experiments" / "protocols.lock")
    return tmp_path


def test_bad_protocol_is_one_error_line_exit_2(tmp_path, cli):
    root = _copy(tmp_path)
    path = root / "experiments" / "protocols" / "E002.yaml"
    path.write_text(path.read_text().replace("metric: admission_capacity_gain\n", "metric: admission_gain\n"))
    line = next(i for i, t in enumerate(path.read_text().splitlines(), 1) if "metric: admission_gain" in t)
    proc = gpustack("--build-dir", str(REPO / "build"), "experiment", "check", cwd=root)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith(f"Error: experiments/protocols/E002.yaml:{line}: falsifiers[2].metric: "
                                  "unknown metric 'admission_gain'"), proc.stderr
    # `gpustack check` reports the same protocol error as a finding (exit 1), beside the catalog's.
    check = cli("--build-dir", str(REPO / "build"), "check", "--json", cwd=root)
    assert check.returncode == 1, check.stderr
    found = json.loads(check.stdout)["findings"]
    assert [(f["id"], f["file"], f["line"]) for f in found] == [
        ("experiment.protocol", "experiments/protocols/E002.yaml", line)]


def test_edited_frozen_protocol_is_refused_and_nothing_written(tmp_path, cli):
    root = _copy(tmp_path)
    path = root / "experiments" / "protocols" / "E001.yaml"
    path.write_text(path.read_text().replace("planned_sample_size: 200", "planned_sample_size: 20"))
    proc = cli("--build-dir", str(REPO / "build"), "experiment", "run", "E001", "--replications", "2", cwd=root)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert "E001 version 1 differs from its frozen copy in planned_sample_size" in proc.stderr
    assert not (root / "experiments" / "results").exists()
    freeze = cli("--build-dir", str(REPO / "build"), "experiment", "freeze", "E001", cwd=root)
    assert freeze.returncode == 2 and "differs from its frozen copy in planned_sample_size" in freeze.stderr
    lock = "experiments/protocols.lock"
    assert (root / lock).read_bytes() == (REPO / lock).read_bytes()


def test_audit_and_log_check_on_the_repository(cli):
    audit = cli("experiment", "audit", "--json")
    assert audit.returncode == 0, audit.stderr
    data = json.loads(audit.stdout)
    assert data["flagged"] == 0
    gate = next(g for g in data["gates"] if g["protocol"] == "E006@1" and g["gate"] == "F3")
    assert gate["min_samples"] == 299 and gate["rule"] == "lower >= 0.99"
    log = cli("experiment", "log", "--check")
    assert log.returncode == 0, log.stdout + log.stderr
