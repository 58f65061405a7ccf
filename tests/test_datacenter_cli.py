"""`gpustack simulate` as a user runs it: a good run writes its artifacts; bad input gives one `Error:`
line naming the file and field, exit 2, no traceback, nothing written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
README_RUN = REPO / "runs" / "llama70b_1024xh100.yaml"
EXAMPLE_SITES = REPO / "sites" / "example_two_sites.yaml"


def gpustack(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-c", "from gpustack_sim.cli.main import main; main()", *args],
                          capture_output=True, text=True, env=env, cwd=REPO, timeout=120)


def test_simulate_writes_result_log_and_timeline(tmp_path):
    out = tmp_path / "out"
    proc = gpustack("simulate", str(README_RUN), "--replications", "20", "--seed", "3", "--sites",
                    str(EXAMPLE_SITES), "--explain", "--json", "--out", str(out), "--power-resolution", "3600")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["tokens"] == {"min": 2e12, "max": 2e12}
    assert data["work"]["unbalanced_replications"] == 0
    assert data["placement"] == [["east", 64], ["west", 64]]
    explained = {p["field"]: p for p in data["parameters"]}
    assert explained["step_time_s"]["variable"] == "training.t_step"
    assert {p.name for p in out.iterdir()} == {"result.json", "events.parquet", "power.parquet", "timeline.png"}
    assert data["energy_by_site_j"]["east"]["mean"] == pytest.approx(data["energy_by_site_j"]["west"]["mean"])
    import pyarrow.parquet as pq

    power = pq.read_table(out / "power.parquet").to_pydict()
    assert set(power["site"]) == {"east", "west"} and max(power["width_s"]) == 3600.0


def test_the_readme_run_counts_every_phase_of_its_power(tmp_path):
    """The summary names what stays out of the energy, and no phase is among it: the power series is
    defined in every bin, recovery included."""
    out = tmp_path / "out"
    proc = gpustack("simulate", str(README_RUN), "--replications", "2", "--seed", "1", "--json", "--out", str(out),
                    "--power-resolution", "600")
    assert proc.returncode == 0, proc.stderr
    excluded = json.loads(proc.stdout)["excluded"]
    assert not [e for e in excluded if "no catalog node power" in e]
    assert any("serialises and writes checkpoint shards" in e for e in excluded)
    import math

    import pyarrow.parquet as pq

    power = pq.read_table(out / "power.parquet").to_pydict()
    assert "recovery_w" in power
    assert not any(math.isnan(v) for col in power if col.endswith("_w") for v in power[col])


def _bad_sites(tmp_path: Path, old: str, new: str) -> Path:
    path = tmp_path / "sites.yaml"
    path.write_text(EXAMPLE_SITES.read_text().replace(old, new, 1))
    return path


@pytest.mark.parametrize("case, expected", [
    ("cap_above_grid", "sites[1].power_cap: '750 kW' is above grid_limit '700 kW'"),
    ("negative", "sites[0].storage_bandwidth: '-100 GB/s' is negative"),
    ("unknown_link_site", "links[0].from: unknown site 'north'"),
    ("negative_rate", "cluster.rel.node_fleet_failure_rate"),
    ("unresolved_run", "no_such_preset"),
])
def test_bad_input_is_one_line_nothing_written(tmp_path, case, expected):
    run, sites = README_RUN, None
    if case == "cap_above_grid":
        sites = _bad_sites(tmp_path, "power_cap: 662 kW", "power_cap: 750 kW")
    elif case == "negative":
        sites = _bad_sites(tmp_path, "storage_bandwidth: 100 GB/s", "storage_bandwidth: -100 GB/s")
    elif case == "unknown_link_site":
        sites = _bad_sites(tmp_path, "from: east", "from: north")
    else:
        run = tmp_path / "run.yaml"
        text = README_RUN.read_text()
        if case == "negative_rate":
            text += "  cluster.rel.node_fleet_failure_rate: -1e-3 1/day\n"
        else:
            text = text.replace("presets: [estimate_defaults,", "presets: [no_such_preset, estimate_defaults,")
        run.write_text(text)
    out = tmp_path / "out"
    args = ["simulate", str(run), "--out", str(out)] + (["--sites", str(sites)] if sites else [])
    proc = gpustack(*args)
    # a value outside its variable's catalog assumptions is a finding (exit 1), the rest input errors
    assert proc.returncode == (1 if case == "negative_rate" else 2), (proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error:") and expected in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    if sites is not None:
        assert f"{sites}:" in lines[0]
    assert not out.exists()
