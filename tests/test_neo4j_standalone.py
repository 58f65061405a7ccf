"""With `--neo4j` the graph alone suffices: every reading command runs as a real process in an empty
directory, with the catalog pointed at a path that does not exist (so nothing can be compiled), and
prints exactly what the manifest source prints from the catalog."""

from __future__ import annotations

import json
import os

import pytest
from helpers import REPO, run_cli

RUN = str(REPO / "runs" / "llama70b_1024xh100.yaml")
SERVE_RUN = str(REPO / "runs" / "serve_llama70b_8xh100.yaml")
COMMANDS = {
    "resolve": ("resolve", "econ.cost.per_token", "--preset", "dense_training_cost_fixture", "--constraints"),
    "estimate": ("estimate", RUN, "--samples", "500", "--seed", "1"),
    "sweep": ("sweep", RUN, "--grid", "tp=4,8", "--grid", "pp=4,8", "--grid", "micro_batch=1,2"),
    "serve estimate": ("estimate", SERVE_RUN, "--samples", "300", "--seed", "1"),
    "serve sweep": ("sweep", SERVE_RUN, "--grid", "tp=2,4", "--grid", "replicas=2,4"),
    "cone": ("cone", "+econ.cost.per_token"),
    "root-debt": ("root-debt", "--families", "--limit", "1000"),
    "show": ("show", "econ.cost.per_token"),
    "stats": ("stats",),
    "scenario report": ("scenario", "report", "dense_training_cost_fixture"),
    "presets list": ("presets", "list"),
}
TIMINGS = {"seconds"}  # wall time of the command itself, not an answer


@pytest.fixture(scope="module")
def empty_dir(real_graph, tmp_path_factory):
    """An empty directory, and the environment of a process there that can reach Neo4j and nothing else."""
    here = tmp_path_factory.mktemp("standalone")
    env = {"GPUSTACK_CATALOG": str(here / "no-catalog"), "GPUSTACK_BUILD_DIR": str(here / "no-build"),
           # the code under test, whatever a shared install points at (the empty directory adds nothing)
           "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)}
    return here, env


def answer(stdout: str):
    data = json.loads(stdout)
    return {k: v for k, v in data.items() if k not in TIMINGS} if isinstance(data, dict) else data


def test_no_catalog_can_be_compiled_there(empty_dir, gpustack_cli) -> None:
    # without --neo4j the same environment fails: whatever passes below read the graph alone
    here, env = empty_dir
    res = gpustack_cli("stats", "--json", env={"GPUSTACK_CATALOG": env["GPUSTACK_CATALOG"]})
    assert res.returncode == 2 and "not found" in res.stderr


@pytest.mark.parametrize("command", COMMANDS)
def test_command_from_the_graph_alone(empty_dir, gpustack_cli, real_catalog, real_build, command: str) -> None:
    here, env = empty_dir
    args = (*COMMANDS[command], "--json")
    neo = run_cli(*args, "--neo4j", env=env, cwd=here)
    assert neo.returncode == 0, neo.stderr
    mem = gpustack_cli("--catalog", str(real_catalog), "--build-dir", str(real_build), *args)
    assert mem.returncode == 0, mem.stderr
    assert answer(neo.stdout) == answer(mem.stdout)
    assert not any(here.iterdir()), sorted(p.name for p in here.iterdir())  # nothing compiled, nothing written
