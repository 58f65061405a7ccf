"""The fuzzing campaign in the suite (tests/fuzzing.py): mutated catalogs (200 cases), run files, `--assign`
values, validation CSVs and sweep grids, each run in this process through `gpustack`'s own main(). Every
outcome must be free of tracebacks, exit 0-3, and (for `check`) give every finding a file:line in the
catalog. `benchmarks/fuzz.py --cases 10000` is the long run."""

from __future__ import annotations

import random
import shutil
import tempfile
from pathlib import Path

import pytest
from fuzzing import (
    CATALOG_MUTATORS,
    DOCUMENTS,
    FUZZ_PRESET,
    GRID_AXES,
    GRID_VALUES,
    RUN_FIELD_VALUES,
    RUN_FIELDS,
    Outcome,
    byte_flips,
    document_case,
    hostile_scalar,
    mutate_catalog,
    mutate_csv,
    mutate_value,
    non_utf8,
    truncate,
)
from helpers import REPO, mini_catalog, run_cli_here
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

# Derandomized: CI runs the same cases every time; the database off: nothing is kept between runs.
CAMPAIGN = settings(deadline=None, derandomize=True, database=None, print_blob=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
RUN = REPO / "runs" / "llama70b_1024xh100.yaml"


def run(*args: str) -> Outcome:
    res = run_cli_here(*args)
    return Outcome(res.returncode, res.stdout, res.stderr)


def judged(outcome: Outcome, catalog_name: str | None = None) -> None:
    problems = outcome.problems(catalog_name)
    assert not problems, f"{problems}\nstdout: {outcome.stdout[-2000:]}\nstderr: {outcome.stderr[-2000:]}"


@pytest.fixture(scope="module")
def fuzz_base(tmp_path_factory) -> Path:
    """The mini catalog with a preset: small enough to check 200 mutants of it in about a minute."""
    root = mini_catalog(tmp_path_factory.mktemp("fuzz-base"))
    (root / "presets" / "fuzz.yaml").write_text(FUZZ_PRESET)
    return root


@pytest.fixture(scope="module")
def build_dir(real_build) -> Path:
    """The session's build directory of the real catalog (compiled once)."""
    return real_build


def test_the_fuzz_base_is_clean(fuzz_base) -> None:
    outcome = run("--catalog", str(fuzz_base), "--build-dir", str(fuzz_base.parent / "b"), "check", "--json")
    assert outcome.code == 0 and '"errors": 0' in outcome.stdout, outcome.stdout + outcome.stderr


@settings(CAMPAIGN, max_examples=200)
@given(mutators=st.lists(st.sampled_from(CATALOG_MUTATORS), min_size=1, max_size=2),
       seed=st.integers(0, 2**32 - 1))
def test_mutated_catalogs(fuzz_base, mutators, seed) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "catalog"
        shutil.copytree(fuzz_base, root, symlinks=True)
        for i, mutator in enumerate(mutators):
            if any(p.is_file() for p in root.rglob("*.yaml")):
                mutate_catalog(root, mutator, seed + i)
        outcome = run("--catalog", str(root), "--build-dir", str(Path(tmp) / "build"), "check", "--json")
        judged(outcome, "catalog")


@settings(CAMPAIGN, max_examples=40)
@given(name=st.sampled_from(["gpu.power.total", "link.inter.cable_length", "training.total_tokens",
                             "cluster.storage.fill_fraction", "par.micro_batch"]),
       value=st.sampled_from(["700 W", "100 m", "2e12 token", "0.8", "4"]), seed=st.integers(0, 2**32 - 1))
def test_mutated_assignments(build_dir, name, value, seed) -> None:
    hostile = mutate_value(value, random.Random(seed))
    judged(run("--build-dir", str(build_dir), "resolve", name, "--assign", f"{name}={hostile}"))


@settings(CAMPAIGN, max_examples=60)
@given(field=st.sampled_from(RUN_FIELDS), value=st.sampled_from(RUN_FIELD_VALUES),
       mutator=st.sampled_from([None, byte_flips, truncate, hostile_scalar, non_utf8]),
       seed=st.integers(0, 2**32 - 1))
def test_mutated_run_files(build_dir, field, value, mutator, seed) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "run.yaml"
        data = RUN.read_bytes()
        path.write_bytes(mutator(data, random.Random(seed)) if mutator else data)
        judged(run("--build-dir", str(build_dir), "estimate", str(path), "--samples", "10",
                   "--set", f"{field}={value}"))


@settings(CAMPAIGN, max_examples=50)
@given(axes=st.lists(st.sampled_from(GRID_AXES), min_size=1, max_size=3, unique=True),
       values=st.lists(st.lists(st.sampled_from(GRID_VALUES), min_size=1, max_size=3), min_size=3, max_size=3))
def test_mutated_sweep_grids(build_dir, axes, values) -> None:
    grid = [arg for axis, vals in zip(axes, values) for arg in ("--grid", f"{axis}={','.join(vals)}")]
    judged(run("--build-dir", str(build_dir), "sweep", str(RUN), *grid))


@settings(CAMPAIGN, max_examples=40)
@given(seed=st.integers(0, 2**32 - 1))
def test_mutated_validation_csvs(build_dir, seed) -> None:
    rows = b"\n".join([
        b"model,hardware,precision,hidden,ffn_hidden,heads,layers,seq_len,vocab,gpus,tp,pp,dp,global_batch,"
        b"micro_batch,pipeline_interleaving,recompute,sequence_parallel,seconds_per_iteration",
        b"megatron-22B,nvidia_a100_sxm4_80gb,fp16,6144,24576,64,48,2048,51200,8,8,1,1,4,4,1,full,false,1.42",
        b"megatron-22B,nvidia_a100_sxm4_80gb,fp16,6144,24576,64,48,2048,51200,8,8,1,1,4,4,1,selective,true,1.10",
    ]) + b"\n"
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "rows.csv"
        path.write_bytes(mutate_csv(rows, random.Random(seed)))
        judged(run("--build-dir", str(build_dir), "validate", str(path), "--samples", "10"))


@settings(CAMPAIGN, max_examples=200)
@given(kind=st.sampled_from(sorted(DOCUMENTS)), seed=st.integers(0, 2**32 - 1))
def test_mutated_documents(build_dir, kind, seed) -> None:
    # Sites files (simulate --sites), serving runs (estimate), observations (validate), protocols (experiment check).
    with tempfile.TemporaryDirectory() as tmp:
        judged(run(*document_case(kind, random.Random(seed), REPO, Path(tmp), build_dir)))
