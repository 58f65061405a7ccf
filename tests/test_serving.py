"""Serving: the `serve.` catalog system, serving run files, their estimate and sweep, and the API.

The bounds and capacities are derived here by hand from the model card shapes and the datasheet
numbers, never read back from the engine, so a wrong relation in catalog/serving/ fails them."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from helpers import CATALOG, REPO, gp, run_cli

from gpustack_compiler.base.errors import InputError
from gpustack_compiler.manifest.source import ManifestSource
from gpustack_sim import Engine
from gpustack_sim.engine.serve_run import ServeRunSpec

LLAMA = REPO / "runs" / "serve_llama70b_8xh100.yaml"
MIXTRAL = REPO / "runs" / "serve_mixtral8x7b_8xh100.yaml"

# Llama-2-70B (Dubey et al. 2024 Table 3; Touvron et al. 2023): shape by hand.
H, LAYERS, FFN, HEADS, KV_HEADS, HEAD_DIM, VOCAB = 8192, 80, 28672, 64, 8, 128, 32000
H100_HBM_BANDWIDTH = 3.35e12  # B/s, NVIDIA H100 SXM datasheet
H100_HBM_CAPACITY = 80e9  # B, the DGX H100 node preset's datasheet figure
GiB = 2**30


def llama70b_params() -> int:
    attn = 2 * H * H + 2 * H * KV_HEADS * HEAD_DIM  # Wq, Wo square; Wk, Wv of the 8 KV heads
    ffn = 3 * H * FFN  # SwiGLU gate, up, down
    norms = 2 * H  # two RMSNorms per layer
    return LAYERS * (attn + ffn + norms) + 2 * VOCAB * H + H  # untied embedding and head, final norm


@pytest.fixture(scope="module")
def engine(real_manifest: dict) -> Engine:
    return Engine(ManifestSource(real_manifest))


@pytest.fixture(scope="module")
def llama(engine: Engine) -> ServeRunSpec:
    run = engine.load_run(LLAMA)
    assert isinstance(run, ServeRunSpec)
    return run


def resolve(engine: Engine, run: ServeRunSpec, target: str, **assign) -> float:
    res = engine.resolve(target, engine.run_scenario(run.with_extras(assign=assign)))
    assert res.value is not None, res.missing
    return res.value


def test_decode_of_70b_at_batch_one_is_bandwidth_bound(engine: Engine, llama: ServeRunSpec) -> None:
    # FP8 weights (1 B each) split over tensor parallelism 2: every decode step reads them all.
    weights_per_gpu = llama70b_params() * 1 / 2
    bound = weights_per_gpu / H100_HBM_BANDWIDTH  # no decode step can be faster
    t = resolve(engine, llama, "serve.decode.t_iteration", **{"serve.batch": 1})
    assert resolve(engine, llama, "serve.decode.memory_bound", **{"serve.batch": 1}) == 1
    # Within the weights-over-bandwidth bound: slower than the peak, and at least 40% of it (MBU >= 0.4).
    assert bound <= t <= bound / 0.4, (t, bound)
    mem = resolve(engine, llama, "serve.decode.t_weights") + resolve(engine, llama, "serve.decode.t_kv_per_sequence")
    assert mem > resolve(engine, llama, "serve.decode.t_compute_per_sequence") * 10
    assert resolve(engine, llama, "serve.memory.weights_per_gpu") == pytest.approx(weights_per_gpu)


def test_kv_capacity_gqa_matches_hand_computation(engine: Engine, llama: ServeRunSpec) -> None:
    kv_per_token = 2 * KV_HEADS * HEAD_DIM * LAYERS * 2  # keys and values, BF16
    assert kv_per_token == 327_680
    per_gpu = kv_per_token / 2  # 8 KV heads over tensor parallelism 2
    # One layer's activations of a 512-token chunk (Korthikanti widths, 2-byte values), split over tp 2.
    act = 512 * (4 * H + (HEADS * HEAD_DIM + 2 * KV_HEADS * HEAD_DIM + HEADS * HEAD_DIM) + 3 * FFN) * 2 / 2
    free = 0.9 * H100_HBM_CAPACITY - llama70b_params() / 2 - act
    tokens = free / per_gpu
    assert resolve(engine, llama, "serve.kv.capacity_tokens") == pytest.approx(tokens, rel=1e-9)
    assert resolve(engine, llama, "serve.batch.kv_limit") == math.floor(tokens / (1000 + 300 + 16 / 2))
    # More ranks than KV heads: the heads are replicated, a GPU still holds one head's share.
    assert resolve(engine, llama, "serve.kv.bytes_per_token_per_gpu", **{"par.tp": 16}) == kv_per_token / 8


def test_kv_capacity_mla_matches_hand_computation(engine: Engine) -> None:
    # DeepSeek-V2 (Section 3.1.2): 60 layers, latent d_c = 512 and decoupled RoPE key d_h^R = 64 cached
    # per token and layer; the latent is shared by all heads, so tensor parallelism does not split it.
    layers, d_c, d_rope = 60, 512, 64
    weights, act = 30e9, 1e9  # given per GPU: only the cache arithmetic is under test
    scenario = engine.scenario(["gpu_h100_sxm", "dgx_h100_node", "serve_kv_bf16"],
                               {"arch.n_layers": layers, "arch.mla.kv_lora_rank": d_c, "arch.mla.rope_head_dim": d_rope,
                                "par.tp": 8, "par.pp": 1, "serve.memory.utilization": 0.9,
                                "serve.memory.weights_per_gpu": f"{weights} B",
                                "serve.memory.activations_per_gpu": f"{act} B"}, modes=["mla"])
    per_token = (d_c + d_rope) * layers * 2
    assert engine.resolve("serve.kv.bytes_per_token_per_gpu", scenario).value == per_token
    cap = engine.resolve("serve.kv.capacity_tokens", scenario).value
    assert cap == pytest.approx((0.9 * H100_HBM_CAPACITY - weights - act) / per_token, rel=1e-12)


@pytest.mark.parametrize("algorithm, startups, volume", [
    ("in_switch", lambda t: 2, lambda t: 1),  # NVLS, as dgx_h100_node selects: once up, once down
    ("ring", lambda t: 2 * (t - 1), lambda t: 2 * (t - 1) / t),  # Thakur et al. Section 4
])
def test_serving_all_reduces_follow_the_nodes_algorithm(engine: Engine, llama: ServeRunSpec, algorithm, startups,
                                                        volume) -> None:
    # Two all-reduces per layer of h activations per sequence, each with the start-ups, volume, latency and rate
    # of the algorithm the node selects (the in-switch reduction's own, copies' around a ring); nothing with one
    # rank.
    run = llama.with_extras(variants={"col.tp.allreduce_startups": algorithm, "col.tp.allreduce_volume": algorithm,
                                      "col.tp.allreduce_alpha": algorithm, "col.tp.allreduce_beta": algorithm})
    for tp in (1, 2, 8):
        fixed = resolve(engine, run, "serve.comm.t_fixed", **{"par.tp": tp})
        per_sequence = resolve(engine, run, "serve.comm.t_per_sequence", **{"par.tp": tp})
        if tp == 1:
            assert fixed == 0 and per_sequence == 0
            continue
        alpha = resolve(engine, run, "link.nvls.alpha" if algorithm == "in_switch" else "col.tp.alpha",
                        **{"par.tp": tp}) * 1e-6  # us
        beta = resolve(engine, run, "link.nvls.beta" if algorithm == "in_switch" else "col.tp.beta",
                       **{"par.tp": tp}) * 1e-9  # s/GB
        assert fixed == pytest.approx(2 * LAYERS * startups(tp) * alpha)
        assert per_sequence == pytest.approx(2 * LAYERS * volume(tp) * beta * H * 2)  # BF16 activations


def test_queueing_and_speculation_follow_their_references(engine: Engine, llama: ServeRunSpec) -> None:
    mu = resolve(engine, llama, "serve.replica.capacity")
    lam = 20 / 4  # the run's peak over its four replicas
    rho = lam / mu
    # M/M/1: P(W > t) = rho exp(-(mu - lambda) t) (Gross et al. Section 2.2).
    assert resolve(engine, llama, "serve.queue.wait_p99") == pytest.approx(math.log(100 * rho) / (mu - lam), rel=1e-9)
    spec = ServeRunSpec.model_validate({**llama.model_dump(), "speculative": {"draft_tokens": 4, "acceptance": 0.75,
                                                                              "draft_cost": 0.05}})
    alpha, gamma, c = 0.75, 4, 0.05
    tokens = (1 - alpha ** (gamma + 1)) / (1 - alpha)  # Leviathan et al. Equation 1
    assert resolve(engine, spec, "serve.spec.tokens_per_step") == pytest.approx(tokens)
    assert resolve(engine, spec, "serve.spec.cost_factor") == pytest.approx(gamma * c + 1)
    plain = resolve(engine, llama, "serve.decode.t_budget")
    chunk = resolve(engine, llama, "serve.prefill.t_chunk")
    assert resolve(engine, spec, "serve.decode.t_budget") == pytest.approx((plain + chunk) * tokens / (gamma * c + 1)
                                                                            - chunk)


@pytest.fixture(scope="module")
def estimate(real_build: Path) -> dict:
    res = gp(real_build, "estimate", str(LLAMA), "--json", "--samples", "300")
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def test_estimate_reports_every_serving_figure(estimate: dict) -> None:
    figures = {f["target"]: f for f in estimate["figures"]}
    for target in ("serve.ttft_p50", "serve.ttft_p99", "serve.tpot_p50", "serve.tpot_p99", "serve.batch",
                   "serve.throughput.output_per_gpu", "serve.energy_per_output_token", "serve.cost.per_input_token",
                   "serve.cost.per_output_token"):
        f = figures[target]
        assert f["value"] is not None and f["value"] > 0 and not f["missing"], f
        assert f["p5"] <= f["p50"] <= f["p95"], f
    assert figures["serve.ttft_p50"]["value"] <= figures["serve.ttft_p99"]["value"]
    assert figures["serve.tpot_p50"]["value"] <= figures["serve.tpot_p99"]["value"] <= 200
    assert figures["serve.batch"]["value"] == min(figures["serve.batch.kv_limit"]["value"],
                                                   figures["serve.batch.latency_limit"]["value"])
    assert not any(f["violated"] for f in estimate["figures"])
    assert "serve_weights_fp8" in estimate["presets"] and "dense" in estimate["modes"]


def test_estimate_is_deterministic_and_traced(real_build: Path, estimate: dict) -> None:
    again = run_cli("--catalog", str(CATALOG), "--build-dir", str(real_build), "estimate", str(LLAMA), "--json",
                    "--samples", "300")
    assert json.loads(again.stdout) == estimate
    traced = gp(real_build, "estimate", str(LLAMA), "--samples", "2", "--trace", "TPOT p99")
    assert traced.returncode == 0, traced.stderr
    assert "trace of serve.tpot_p99:" in traced.stdout and "serve.decode.t_iteration.roofline" in traced.stdout


def test_overload_is_reported_as_violated(real_build: Path) -> None:
    res = gp(real_build, "estimate", str(LLAMA), "--samples", "2", "--set", "workload.request_rate=200")
    assert res.returncode == 0, res.stderr
    assert "VIOLATED" in res.stdout and "serve.replica.stable" in res.stdout


def test_moe_run_resolves_with_expert_parallel_communication(engine: Engine) -> None:
    run = engine.load_run(MIXTRAL)
    est = engine.serve_estimate(run, samples=0)
    values = {f.target: f.value for f in est.figures}
    assert all(v is not None for v in values.values()), {k for k, v in values.items() if v is None}
    assert "moe" in est.modes
    assert resolve(engine, run, "serve.comm.ep_per_sequence") > 0
    dense = resolve(engine, run, "serve.comm.ep_per_sequence", **{"par.ep": 1})
    assert dense == 0


@pytest.mark.parametrize("edit,message", [
    (("layout: {tp: 2, pp: 1, replicas: 4}", "layout: {tp: 2, pp: 1, replicas: 4, tpp: 2}"),
     "layout.tpp: Extra inputs are not permitted"),
    (("objectives: {ttft_p99_ms: 2000, tpot_p99_ms: 200}", "objectives: {ttft_p99_ms: -1, tpot_p99_ms: 200}"),
     "objectives.ttft_p99_ms: Input should be greater than 0"),
    (("input_tokens: {mean: 1000, max: 3072}", "input_tokens: {mean: 1000, max: 9000}"),
     "workload.input_tokens.max = 9000 exceeds the model's context seq_len = 4096"),
    (("load_curve: [", "mean_to_peak: 0.5\n  load_curve: ["), "mean_to_peak = 0.5 but the load curve's mean over its peak is"),
])
def test_bad_serving_run_files(tmp_path: Path, real_build: Path, edit: tuple[str, str], message: str) -> None:
    text = LLAMA.read_text()
    old, new = edit
    assert old in text
    path = tmp_path / "serve_bad.yaml"
    path.write_text(text.replace(old, new, 1))
    res = gp(real_build, "estimate", str(path))
    assert res.returncode == 2 and "Traceback" not in res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"Error: {path}:") and message in lines[0], res.stderr


def test_sweep_ranks_serving_layouts_by_cost(engine: Engine, llama: ServeRunSpec) -> None:
    result = engine.sweep(llama, {"tp": [1, 2, 4, 8], "replicas": [1, 2, 4]})
    assert result.objective == "cost_per_output_token" and result.evaluated == 12
    assert result.valid + sum(result.rejected.values()) == 12 and result.valid > 0
    costs = [row["cost_per_output_token"] for row in result.top]
    assert costs == sorted(costs)
    # The run's own layout scores as its estimate does.
    own = next(r for r in result.top if r["tp"] == 2 and r["replicas"] == 4)
    point = resolve(engine, llama, "serve.cost.per_output_token")
    assert own["cost_per_output_token"] == pytest.approx(point, rel=1e-9)
    # One replica cannot carry the peak: rejected, never ranked.
    assert not any(r["replicas"] == 1 and r["tp"] <= 2 for r in result.top)
    with pytest.raises(InputError, match="not a serving sweep axis"):
        engine.sweep(llama, {"micro_batch": [1, 2]})


def test_simulate_of_a_serving_run_needs_its_workload_family(real_build: Path) -> None:
    # `simulate` replays a serving run's fleet (tests/test_serving_replay.py); without a family it says so.
    res = gp(real_build, "simulate", str(LLAMA))
    assert res.returncode == 2 and "a serving run needs --arrivals" in res.stderr


OBSERVATIONS = REPO / "data" / "observations" / "azure_vllm_llama31_70b_h100.yaml"


def test_validate_scores_serving_evaluation_rows(engine: Engine) -> None:
    result = engine.validate(OBSERVATIONS, samples=50)
    panel = result.panels["azure_vllm_llama31_70b_fp8"]
    assert panel["n"] == 6 and panel["unresolved"] == 0
    assert panel["targets"] == ["serve.throughput.total_fleet"] and panel["mape"] > 0
    for row in result.rows:
        assert row["error"] == pytest.approx((row["predicted"] - row["measured"]) / row["measured"])


def test_bad_inline_serving_run_in_an_observation(tmp_path: Path, real_build: Path) -> None:
    text = OBSERVATIONS.read_text().replace("layout: {tp: 8, pp: 1, replicas: 1}", "layout: {tp: 0, pp: 1, replicas: 1}", 1)
    path = tmp_path / "bad_obs.yaml"
    path.write_text(text)
    res = gp(real_build, "validate", str(path))
    assert res.returncode == 2 and "Traceback" not in res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"Error: {path}:") and "layout.tp" in lines[0], res.stderr


def test_quantised_weights_move_decode_and_prefill_as_their_bytes_and_rates(engine: Engine, llama: ServeRunSpec) -> None:
    def with_weights(preset: str) -> ServeRunSpec:
        return ServeRunSpec.model_validate({**llama.model_dump(), "precision": [preset, "serve_kv_bf16"]})

    bf16, fp8, int4 = (with_weights(p) for p in ("serve_weights_bf16", "serve_weights_fp8", "serve_weights_int4_awq"))
    weights = {name: resolve(engine, run, "serve.decode.t_weights") for name, run in
               (("bf16", bf16), ("fp8", fp8), ("int4", int4))}
    # Decode reads every weight once per step: its weight time follows the bytes per weight (2, 1, 0.5 + 2/128).
    assert weights["fp8"] / weights["bf16"] == pytest.approx(1 / 2)
    assert weights["int4"] / weights["bf16"] == pytest.approx((0.5 + 2 / 128) / 2)
    # Prefill is compute-bound: FP8 doubles the tensor-core rate, INT4 weight-only keeps the 16-bit one.
    chunk = {name: resolve(engine, run, "serve.prefill.t_chunk") for name, run in (("bf16", bf16), ("fp8", fp8),
                                                                                    ("int4", int4))}
    assert chunk["fp8"] == pytest.approx(chunk["bf16"] / 2) and chunk["int4"] == pytest.approx(chunk["bf16"])
