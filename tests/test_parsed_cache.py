"""Relations parsed into sympy are kept in the build cache between runs (gpustack_sim/engine/cache.py):
read back they resolve exactly as freshly parsed ones, and a damaged cache is parsed again."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from helpers import CATALOG, FIXTURE, REPO

from gpustack_sim import Engine

RUN = REPO / "runs" / "llama70b_1024xh100.yaml"

TARGET = "econ.cost.per_token"


@pytest.fixture
def build(tmp_path: Path, real_build: Path, real_manifest: dict) -> Path:
    """A build directory of its own (these tests watch its parsed-relations file), compile cache copied warm."""
    shutil.copytree(real_build / "cache", tmp_path / "cache", ignore=shutil.ignore_patterns("parsed-*"))
    return tmp_path


def resolve(build: Path):
    engine = Engine.open(CATALOG, build)
    return engine, engine.resolve(TARGET, engine.scenario([FIXTURE]))


def test_parsed_relations_are_kept_and_read_back(build: Path) -> None:
    first, fresh = resolve(build)
    assert len(first.parsed) > 10
    first.keep_parsed()
    [kept] = (build / "cache").glob("parsed-*.pickle")
    written = kept.stat().st_mtime_ns
    second, again = resolve(build)
    assert set(second.parsed) == set(first.parsed)  # nothing parsed anew: all read back
    assert all(second.parsed[k] == first.parsed[k] for k in first.parsed)
    assert again.to_dict() == fresh.to_dict()
    second.keep_parsed()  # nothing new: the file is left as it was
    assert list((build / "cache").glob("parsed-*.pickle")) == [kept] and kept.stat().st_mtime_ns == written


def test_a_damaged_cache_is_parsed_again(build: Path) -> None:
    first, fresh = resolve(build)
    first.keep_parsed()
    [kept] = (build / "cache").glob("parsed-*.pickle")
    kept.write_bytes(b"not a pickle")
    second, again = resolve(build)
    assert again.to_dict() == fresh.to_dict()
    second.keep_parsed()
    assert kept.read_bytes() != b"not a pickle"
    third, once_more = resolve(build)
    assert set(third.parsed) == set(first.parsed) and once_more.to_dict() == fresh.to_dict()


def test_what_a_run_resolves_is_read_back_not_resolved_again(build: Path, monkeypatch) -> None:
    # A sweep's numeric model and an estimate's resolutions are kept beside the relations: a second process
    # pays none of their symbolic work, and shows byte for byte what the first did.
    first = Engine.open(CATALOG, build)
    run = first.load_run(RUN)
    grid = {"tp": ["4", "8"], "micro_batch": ["1", "2"], "zero_stage": ["0", "1"]}
    estimate, swept = first.estimate(run, samples=300).to_dict(), first.sweep(run, grid).to_dict()
    first.keep_parsed()

    def resolving(*args, **kwargs):
        raise AssertionError("resolved again")

    second = Engine.open(CATALOG, build)
    monkeypatch.setattr(second.resolver, "resolve_many", resolving)
    assert second.sweep(run, grid).to_dict() == swept
    assert json.dumps(second.estimate(run, samples=300).to_dict()) == json.dumps(estimate)
    other = run.model_copy(update={"gpus": run.gpus // 2,
                                   "layout": run.layout.model_copy(update={"dp": run.layout.dp // 2})})
    with pytest.raises(AssertionError, match="resolved again"):
        second.estimate(other, samples=300)  # another run is another key


def test_only_the_newest_results_are_written_back(tmp_path: Path) -> None:
    from gpustack_sim.engine.cache import KEPT_RESULTS, RESULT, ParsedRelations

    memo = ParsedRelations(tmp_path / "parsed.pickle")
    memo[("some.relation", "expression")] = 1.0
    for k in range(KEPT_RESULTS + 5):
        memo[(RESULT, "test", str(k))] = {"k": k}
    memo.save()
    again = ParsedRelations(tmp_path / "parsed.pickle")
    assert again[("some.relation", "expression")] == 1.0
    kept = [k for k in range(KEPT_RESULTS + 5) if (RESULT, "test", str(k)) in again]
    assert kept == list(range(5, KEPT_RESULTS + 5))  # the oldest five dropped
    assert again[(RESULT, "test", "7")] == {"k": 7} and again.get((RESULT, "test", "0")) is None
