"""Resolution reads the graph through either source with identical values and traces."""

from __future__ import annotations

import pytest
from helpers import FIXTURE

from gpustack_compiler.language.units import UnitSystem
from gpustack_compiler.manifest.records import Tables
from gpustack_compiler.manifest.source import ManifestSource
from gpustack_compiler.neo4j.source import Neo4jSource
from gpustack_sim.engine.resolver import Resolver
from gpustack_sim.engine.scenario import ScenarioBuilder

TARGETS = ["training.tokens_per_sec", "econ.job.dc_power", "econ.run.power_cost", "econ.cost.per_token",
           "thermal.dc.pue"]


@pytest.fixture(scope="module")
def resolvers(real_graph, real_manifest):
    units = UnitSystem.from_manifest(real_manifest["units"])
    with Neo4jSource(real_graph.settings) as neo:
        mem = ManifestSource(real_manifest)
        yield Resolver(neo, units), Resolver(mem, units), ScenarioBuilder(mem, Tables.parse(mem.tables()), units)


def _steps(res) -> list[dict]:
    return [s.to_dict() for s in res.trace]


@pytest.mark.parametrize("target", TARGETS)
def test_same_value_and_trace(resolvers, target: str) -> None:
    neo, mem, scenarios = resolvers
    scenario = scenarios.build([FIXTURE])
    a, b = neo.resolve(target, scenario), mem.resolve(target, scenario)
    assert a.value == b.value and a.missing == b.missing
    assert _steps(a) == _steps(b)
    assert [c.to_dict() for c in a.checks] == [c.to_dict() for c in b.checks]


def test_same_symbolic_result_with_missing_roots(resolvers) -> None:
    neo, mem, scenarios = resolvers
    scenario = scenarios.build([FIXTURE])
    del scenario.assignments["gpu.power.total"]
    scenario.variants["gpu.power.total"] = "measured"
    a, b = neo.resolve("econ.cost.per_token", scenario), mem.resolve("econ.cost.per_token", scenario)
    assert a.missing == b.missing and a.missing and a.expression == b.expression


def _estimates(resolvers, run_file: str, samples: int) -> tuple[dict, dict]:
    """The whole estimate of a run file (a training or a serving run) from Neo4j and from the manifest."""
    from pathlib import Path

    from gpustack_sim.analyses.estimate import estimate, serve_estimate
    from gpustack_sim.engine.facts import Facts
    from gpustack_sim.engine.run_file import load_run
    from gpustack_sim.engine.serve_run import ServeRunSpec

    neo, mem, scenarios = resolvers
    facts = Facts(Tables.parse(mem.source.tables()))
    run = load_run(Path(__file__).resolve().parent.parent / "runs" / run_file)
    fn = serve_estimate if isinstance(run, ServeRunSpec) else estimate
    return fn(neo, scenarios, facts, run, samples, 1).to_dict(), fn(mem, scenarios, facts, run, samples, 1).to_dict()


def test_same_estimate_of_the_readme_run(resolvers) -> None:
    # The whole estimate, intervals and boundaries included, from either source.
    a, b = _estimates(resolvers, "llama70b_1024xh100.yaml", 500)
    assert a == b
    assert any(f["leaves_out"] for f in a["figures"])


def test_same_estimate_of_a_serving_run(resolvers) -> None:
    # A serving run's whole estimate, intervals and violated checks included, from either source.
    a, b = _estimates(resolvers, "serve_mixtral8x7b_8xh100.yaml", 300)
    assert a == b
    assert all(f["value"] is not None for f in a["figures"])


def test_same_estimate_of_a_run_with_the_architecture_and_overlap_fields(resolvers) -> None:
    # MLA, MoE, uneven stages, every overlap field off its default and the interleave left to the model:
    # the run-field table's modes, list defaults and the sweep behind the chosen interleave, from either source.
    from pathlib import Path

    import yaml

    from gpustack_sim.analyses.estimate import estimate
    from gpustack_sim.engine.facts import Facts
    from gpustack_sim.engine.run import RunSpec, apply_overrides

    neo, mem, scenarios = resolvers
    facts = Facts(Tables.parse(mem.source.tables()))
    data = yaml.safe_load((Path(__file__).resolve().parent.parent / "runs" / "llama70b_1024xh100.yaml").read_text())
    del data["layout"]["interleave"]
    apply_overrides(data, [
        "model.moe={experts: 64, top_k: 4, expert_ffn_hidden: 4096, dense_layers: 2}",
        "model.mla={kv_lora_rank: 512, q_lora_rank: 1536, qk_rope_head_dim: 64, qk_nope_head_dim: 128, "
        "v_head_dim: 128}", "model.kv_heads=64", "layout.ep=8", "layout.first_stage_layers=19",
        "layout.last_stage_layers=19", "layout.tp_overlap=comm_gemm", "layout.ep_overlap=dualpipe",
        "layout.dp_overlap=layer_chunks", "layout.cp_comm=all_gather", "layout.cp=2", "layout.dp=16"])
    run = RunSpec.model_validate(data)
    a, b = estimate(neo, scenarios, facts, run, 200, 1), estimate(mem, scenarios, facts, run, 200, 1)
    assert a.to_dict() == b.to_dict()
    assert {"mla", "moe", "uneven_stages", "tp_comm_overlap", "dualpipe", "layer_chunks", "cp_all_gather"} \
        <= set(a.modes)
    assert a.figures[0].value is not None
