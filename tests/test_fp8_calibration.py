"""FP8 training precision (linear-layer GEMMs in their own format, quantization casts) and the component-level
calibration per hardware generation (kernel and memory benchmarks as calibration observations)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from helpers import CATALOG, REPO, gp, observed_run_value

from gpustack_compiler.base.errors import InputError
from gpustack_sim import Engine
from gpustack_sim.analyses.calibrate import fit
from gpustack_sim.engine.facts import Parameter
from gpustack_sim.engine.observation import load_observations

OBSERVATIONS = REPO / "data" / "observations"
NEMO = OBSERVATIONS / "nemo2407_dgx_h100.yaml"
NARAYANAN = OBSERVATIONS / "narayanan2021_table1.yaml"
COMPONENTS = OBSERVATIONS / "azure_components.yaml"


# ---- FP8 precision -------------------------------------------------------------------------------------

def test_fp8_preset_resolves_the_nemo_rows(engine: Engine) -> None:
    result = engine.validate(NEMO, samples=2)  # no assignment: H100 rows resolve from presets
    assert result.unresolved == []
    loaded = load_observations([NEMO])
    superseded = {i.obs.supersedes for i in loaded if i.obs.supersedes}
    assert sorted(r["id"] for r in result.rows) == sorted(i.obs.id for i in loaded if i.obs.id not in superseded)
    assert all(r["predicted"] > 0 for r in result.rows)


def gemm_scenario(engine: Engine, precision: str, m: int, n: int, k: int):
    return engine.scenarios.build(
        ["gpu_h100_sxm", precision, "megatron_lm_software", "estimate_defaults"],
        {"kernel.gemm.m": m, "kernel.gemm.n": n, "kernel.gemm.k": k, "mem.l2.bytes_per_clk_datasheet": "5120 B",
         # The same large-GEMM efficiency for both formats isolates what the format itself does.
         "kernel.gemm.efficiency_large": 0.7, "kernel.gemm.efficiency_large_fp8": 0.7, "kernel.mem.efficiency": 0.9})


def test_fp8_gemm_with_its_casts_takes_between_half_and_all_of_the_bf16_time(engine: Engine) -> None:
    # GPT-3 175B FFN up-projection on one of four tensor-parallel ranks: M = 2048 tokens, N = 49152 / 4, K = 12288.
    m, n, k = 2048, 12288, 12288
    flops = 2 * m * n * k
    # By hand, from the H100 SXM figures: 132 SMs, 1830 MHz, 989.4 TFLOP/s dense BF16 (twice that in FP8), 3.352
    # TB/s HBM (5 stacks x 16 channels x 64 bit x 5.24 Gbit/s), L2 5120 B/clk; Megatron's 256 x 128 tiles, whose
    # A tile one multicast read gives a pair of thread blocks along N: 256 x 256 outputs per L2 read.
    peak16 = 132 * 4096 * 1.83e9
    hbm = 5 * 16 * 64 * 5.24e9 / 8
    l2 = 5120 * 1.83e9
    tiles = (m // 256) * (n // 128)                   # 8 x 96 = 768 tiles
    waves = -(-tiles // 132)                          # 6 waves of 132 SMs
    quant = tiles / (waves * 132)
    intensity_hbm16 = flops / (2 * (m * k + k * n + m * n))
    intensity_hbm8 = flops / (m * k + k * n + 2 * m * n)
    roof16 = min(1, intensity_hbm16 / (peak16 / hbm), (2 * 256 * 256 / (512 * 2)) / (peak16 / l2))
    roof8 = min(1, intensity_hbm8 / (2 * peak16 / hbm), (2 * 256 * 256 / (512 * 1)) / (2 * peak16 / l2))
    t16 = flops / (peak16 * 0.7 * quant * roof16)
    t8 = flops / (2 * peak16 * 0.7 * quant * roof8)
    # Delayed scaling: read the BF16 input once, write a row-wise and a transposed FP8 copy (per-tensor scale).
    cast = m * k * (2 + 2 * (1 + 4 / (m * k))) / (0.9 * hbm)

    def achieved(precision: str) -> float:
        res = engine.resolve("kernel.gemm.achieved_flops", gemm_scenario(engine, precision, m, n, k))
        assert res.units == "TFLOP/s" and res.value is not None
        return res.value * 1e12

    assert flops / achieved("precision_bf16_mixed") == pytest.approx(t16, rel=1e-3)
    assert flops / achieved("precision_fp8_te_delayed_scaling") == pytest.approx(t8, rel=1e-3)
    per_element = engine.resolve("precision.cast.bytes_per_element",
                                 gemm_scenario(engine, "precision_fp8_te_delayed_scaling", m, n, k))
    assert per_element.value * m * k / (0.9 * hbm) == pytest.approx(cast, rel=1e-3)
    assert t16 / 2 < t8 + cast < t16


MBRIDGE2509 = OBSERVATIONS / "mbridge2509_dgx_h100.yaml"
DEEPSEEK = OBSERVATIONS / "deepseek2024_v3.yaml"


@pytest.mark.parametrize("gpu,precision,rate", [
    ("gpu_h100_sxm", "precision_fp8_current_scaling", 0.870),  # TE: split accumulator in dgrad and wgrad only
    ("gpu_h100_sxm", "precision_fp8_te_delayed_scaling", 0.870),
    ("gpu_h100_sxm", "precision_bf16_mixed", 1),  # BF16 has no faster accumulation mode to leave
    ("gpu_h800_sxm", "precision_fp8_blockwise", 1),  # DeepSeek-V3's kernels promote in every GEMM alike
    ("gpu_mi300x", "precision_fp8_current_scaling", 1)])  # hipBLASLt has no fast accumulation
def test_backward_gemms_slow_down_only_where_recipe_and_gpu_split_the_accumulator(engine: Engine, gpu: str,
                                                                                 precision: str, rate: float) -> None:
    scenario = engine.scenarios.build([gpu, precision, "megatron_lm_software", "estimate_defaults"])
    assert engine.resolve("kernel.linear.bwd_rate", scenario).value == pytest.approx(rate)


def test_a_layer_gemms_backward_runs_at_the_split_accumulators_rate(engine: Engine) -> None:
    # GPT-3 175B on NeMo 24.07 (FP8 delayed scaling): each backward GEMM has the forward's FLOPs and operands,
    # its own output tiles, and under Transformer Engine the split accumulator's rate against fast accumulation.
    value = observed_run_value(engine, NEMO, "nemo2407-gpt3-175b-128-gpus")
    quantized = 1 / value("kernel.layer.fc1.dgrad.quant_efficiency") + 1 / value("kernel.layer.fc1.wgrad.quant_efficiency")
    by_hand = value("kernel.layer.fc1.t_fwd") * value("kernel.layer.fc1.quant_efficiency") * quantized / 0.870
    assert value("kernel.layer.fc1.t_bwd") == pytest.approx(by_hand, rel=1e-9)


@pytest.mark.parametrize("path,observation,rows", [
    # Qwen3 30B-A3B: 8 routed copies per token, quantized by GroupedLinear after the BF16 dispatch; no shared
    # expert, tp 1, every layer MoE.
    (MBRIDGE2509, "mbridge2509-qwen3-30b-a3b-16-gpus-v2", 8),
    # Qwen3 235B-A22B: tp 2 with sequence parallelism and etp 1, so a rank's experts see the copies of half the
    # micro-batch's tokens: 8 / 2 per token of M.
    (MBRIDGE2509, "mbridge2509-qwen3-235b-a22b-256-gpus-v2", 4),
    # DeepSeek-V3 quantizes each token once before its FP8 dispatch: one row in its 58 MoE and 3 dense layers.
    (DEEPSEEK, "deepseek2024-v3-pretraining-2048-h800-v6", 1),
    (NEMO, "nemo2407-llama3-70b-64-gpus-v3", 1),  # dense
])
def test_moe_casts_quantize_every_row_the_experts_compute(engine: Engine, path: Path, observation: str,
                                                          rows: float) -> None:
    value = observed_run_value(engine, path, observation)
    assert value("kernel.cast.expert_rows_per_token") == pytest.approx(rows)
    by_hand_inputs = value("kernel.gemm.m") * (value("kernel.layer.qkv.k") + value("kernel.layer.attn_out.k")
                                              + rows * value("kernel.layer.fc1.k") + value("kernel.layer.fc2.k"))
    by_hand_grads = value("kernel.gemm.m") * (value("kernel.layer.qkv.n") + value("kernel.layer.attn_out.n")
                                             + value("kernel.layer.fc1.n") + rows * value("kernel.layer.fc2.n"))
    assert value("kernel.cast.input_elements_per_layer") == pytest.approx(by_hand_inputs, rel=1e-12)
    assert value("kernel.cast.grad_elements_per_layer") == pytest.approx(by_hand_grads, rel=1e-12)


def test_bf16_runs_cast_nothing_and_keep_the_training_format_rate(engine: Engine) -> None:
    scenario = gemm_scenario(engine, "precision_bf16_mixed", 2048, 12288, 12288)
    assert engine.resolve("kernel.step.t_cast", scenario).value == 0
    assert engine.resolve("precision.linear.rate_ratio", scenario).value == 1
    fp8 = gemm_scenario(engine, "precision_fp8_te_delayed_scaling", 2048, 12288, 12288)
    assert engine.resolve("precision.linear.rate_ratio", fp8).value == 2
    # Current scaling reads every tensor twice (amax, then cast): two bytes more per element than delayed.
    current = gemm_scenario(engine, "precision_fp8_current_scaling", 2048, 12288, 12288)
    assert (engine.resolve("precision.cast.bytes_per_element", current).value
            - engine.resolve("precision.cast.bytes_per_element", fp8).value) == pytest.approx(2)


def test_block_scaled_recipes_carry_their_scales() -> None:
    text = (CATALOG / "presets" / "precision.yaml").read_text()
    assert "name: precision_fp8_blockwise" in text and "name: precision_mxfp8" in text


def test_block_scale_bytes_per_element(engine: Engine) -> None:
    # DeepSeek-V3: an FP32 scale per 1 x 128 tile; MXFP8: an E8M0 scale per 32 values. 2 + 2 x (1 + 0.25/8) B.
    for preset in ("precision_fp8_blockwise", "precision_mxfp8"):
        res = engine.resolve("precision.cast.bytes_per_element", engine.scenarios.build([preset]))
        assert res.value == pytest.approx(2 + 2 * (1 + 0.25 / 8)), preset


# ---- component calibration ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def components(build: Path, tmp_path_factory) -> tuple[list[dict], Path, str]:
    out = tmp_path_factory.mktemp("components")
    res = gp(build, "calibrate", "--components", "--out", str(out), "--json")
    assert res.returncode == 0, res.stderr
    text = gp(build, "calibrate", "--components", "--out", str(out)).stdout
    return json.loads(res.stdout), out, text


def test_a_parameter_fixed_by_one_row_borrows_the_scatter_of_the_rows_beside_it(build: Path, tmp_path: Path) -> None:
    # Without the cuBLAS rows, one BF16 GEMM is measured on H100 (the matmul search's best shape): it fixes that
    # efficiency exactly, which it can only since Hopper's multicast lifted the model's L2 ceiling above the
    # measured rate.
    sources = [str(OBSERVATIONS / f) for f in ("amd_maf_mi300x.yaml", "azure_components.yaml", "bekman_mamf.yaml",
                                               "shah2024_flashattention3_fig5.yaml", "together_nccl_h100.yaml",
                                               "xxrjun_alltoall_h100.yaml")]
    res = gp(build, "calibrate", "--components", *sources, "--out", str(tmp_path), "--json")
    assert res.returncode == 0, res.stderr
    h100 = next(d for d in json.loads(res.stdout) if d["preset_name"] == "calibration_h100")
    bf16 = h100["parameters"]["gemm_training_format"]
    assert bf16["exactly_determined"] and 0.5 < bf16["value"] < 1
    assert next(r for r in h100["rows"] if "-gemm-bf16-" in r["id"])["within_uncertainty"]
    # Its one measurement says nothing of how far another shape lands from the model: the spread is the scatter
    # of the generation's FP8 GEMM rows about their own fitted efficiency (log residuals over n - 1 degrees of
    # freedom), on the BF16 value's scale. The memory-bound 802816 x 192 x 768 row runs at the HBM roofline, not
    # at the FP8 efficiency, so it is not among them.
    fp8_rows = [r for r in h100["rows"] if "-gemm-fp8-" in r["id"] and "802816x" not in r["id"]]
    log_scatter = math.sqrt(sum(math.log(r["predicted"] / r["measured"]) ** 2 for r in fp8_rows)
                            / (len(fp8_rows) - 1))
    assert bf16["spread_from"] == "kernel.gemm.achieved_flops"
    assert bf16["sd"] == pytest.approx(bf16["value"] * log_scatter, rel=1e-3)
    preset = (tmp_path / "calibration_h100.yaml").read_text()
    assert "with the scatter of the other 9 kernel.gemm.achieved_flops rows about the fit as its spread" in preset
    said = gp(build, "calibrate", "--components", *sources, "--out", str(tmp_path)).stdout
    assert "the spread of the other kernel.gemm.achieved_flops rows" in said


def test_component_calibration_reproduces_the_committed_presets(components) -> None:
    data, out, _ = components
    assert sorted(d["preset_name"] for d in data) == ["calibration_a100", "calibration_h100", "calibration_h200",
                                                      "calibration_mi300x"]
    for d in data:
        name = d["preset_name"]
        assert (out / f"{name}.yaml").read_text() == (CATALOG / "presets" / f"{name}.yaml").read_text()


def test_a_memory_bound_gemm_runs_at_the_bandwidth_not_below_it(components) -> None:
    # 802816 x 192 x 768 in FP8 on H100: about 256 FLOP/B against a ridge near 680 at the achieved bandwidth, so the
    # roofline bounds it. Multiplying the compute efficiency by the roofline fraction charged it twice (predicted
    # 434 against 663.8 TFLOP/s measured, -35%); the lower of the two lands within 15%.
    data, _, _ = components
    h100 = next(d for d in data if d["preset_name"] == "calibration_h100")
    row = next(r for r in h100["rows"] if r["id"] == "azure-h100-gemm-fp8-802816x192x768")
    assert abs(row["error"]) < 0.15


def test_component_fit_reproduces_its_benchmarks_or_reports_residuals(components) -> None:
    data, _, text = components
    for d in data:
        rows = {r["id"]: r for r in d["rows"]}
        params = d["parameters"]
        # FlashAttention-2, where it is the generation's only attention row, is met exactly, within its rounding.
        alone = d["preset_name"] != "calibration_h100"  # H100 has the FlashAttention-3 paper's sequence sweep too
        assert all(rows[i]["within_uncertainty"] for i in rows if "-flash-" in i and alone)
        assert params["attention"]["exactly_determined"] == alone
        # Five streaming kernels (Copy, Mul, Add, Triad, Dot) measure the one achieved HBM bandwidth, and so does a
        # memory-bound GEMM, which streams its operands at it whatever its compute efficiency: the streaming rows
        # within 12% of it (MI300X's skinny 802816 x 192 x 768 GEMM runs well below its streaming rate and pulls
        # the fit down), and their scatter is the memory efficiency's spread.
        hbm = [r for i, r in rows.items() if "-hbm-" in i]
        assert len(hbm) == 5 and all(abs(r["error"]) < 0.12 for r in hbm)
        assert not params["memory"]["exactly_determined"] and params["memory"]["sd"] > 0
        # GEMM sweeps: one efficiency per format cannot follow every shape; large square and training-like
        # shapes come within 15% on NVIDIA parts, and every row outside its uncertainty is reported as such.
        # MI300X's FP8 sweep falls off at the largest shapes (1223 TFLOP/s at 8192^3, 1081 at 16384^3), which
        # a tile-and-wave model does not follow: within 25%, and the fitted efficiency carries that scatter.
        large = [r for i, r in rows.items() if any(s in i for s in ("8192x8192x8192", "6144x12288x12288",
                                                                    "allreduce-8gpu-67m", "allreduce-8gpu-134m"))]
        bound = 0.25 if d["preset_name"] == "calibration_mi300x" else 0.15
        assert large and all(abs(r["error"]) < bound for r in large)
        outside = [i for i, r in rows.items() if not r["within_uncertainty"]]
        assert outside and all(f"{i}" in text for i in outside)
        assert text.count("outside its uncertainty") >= len(outside)
    h100 = next(d for d in data if d["preset_name"] == "calibration_h100")
    assert set(h100["parameters"]) == {"gemm_training_format", "gemm_fp8", "attention", "attention_fa3",
                                       "attention_overhead_fa2", "attention_overhead_fa3", "attention_exp_fa3",
                                       "attention_cudnn", "attention_overhead_cudnn", "attention_exp_cudnn",
                                       "attention_bwd_fa2", "attention_bwd_fa3", "attention_bwd_cudnn",
                                       "attention_overhead_bwd_fa2", "attention_overhead_bwd_fa3",
                                       "attention_overhead_bwd_cudnn", "attention_exp_bwd_fa3",
                                       "attention_exp_bwd_cudnn", "memory", "link_intra", "link_nvls", "link_inter",
                                       "link_intra_latency", "link_nvls_latency", "per_domain_alltoall"}
    # Four BF16 GEMMs on H100 (the matmul search's best shape and cuBLAS at three large squares) set that
    # efficiency and its spread; each lands within 6% of the one fitted value.
    bf16 = h100["parameters"]["gemm_training_format"]
    assert not bf16["exactly_determined"] and 0.7 < bf16["value"] < 0.9 and bf16["sd"] > 0
    assert bf16["spread_from"] is None
    bf16_rows = [r for r in h100["rows"] if "-gemm-bf16-" in r["id"]]
    assert len(bf16_rows) == 4 and all(abs(r["error"]) < 0.06 for r in bf16_rows)
    # A one-row parameter whose kind no other row of the generation measures keeps no spread: the attention
    # efficiency of a generation with one FlashAttention-2 row.
    assert all(d["parameters"]["attention"]["sd"] is None and d["parameters"]["attention"]["spread_from"] is None
               for d in data if d["preset_name"] != "calibration_h100")
    # The in-switch all-reduce sweep pins its own latency and efficiency, the forced rings the copies' (a ring
    # step's latency and the copy efficiency) and the ports' efficiency: all have a spread. Copies run faster than
    # the in-switch reduction lets the links run (370 against 275 GB/s per direction, nccl-tests issue 212), a
    # ring step starts far sooner than an in-switch message, and the ports run a few per cent below their 400 Gb/s:
    # a tuned ring across two nodes (issue 309) and all-to-alls on ten nodes at NCCL's defaults share one figure.
    p = h100["parameters"]
    assert all(p[k]["sd"] for k in ("link_intra", "link_nvls", "link_inter", "link_intra_latency",
                                    "link_nvls_latency"))
    assert p["link_nvls"]["value"] < 0.7 < p["link_intra"]["value"] < 0.9 < p["link_inter"]["value"] <= 1
    assert p["link_intra_latency"]["value"] < p["link_nvls_latency"]["value"] / 4
    rings = [r for r in h100["rows"] if "ring-allreduce" in r["id"]]
    assert len(rings) == 18 and all(abs(r["error"]) < 0.1 for r in rings)
    assert all(abs(r["error"]) < 0.05 for r in rings if "16gpu" in r["id"])
    all_to_alls = [r for r in h100["rows"] if "-alltoall-" in r["id"]]
    assert len(all_to_alls) == 10 and all(abs(r["error"]) < 0.05 for r in all_to_alls)
    assert 0.9 < p["link_inter"]["value"] < 0.98  # below the tuned ring's 0.99 alone
    # DeepEP's internode kernels (their own benchmark at EP 32 and 64 on H800) reach a share of the port's rate
    # below one, with a spread; each row lands within 5%. Only Hopper has such a benchmark.
    deepep = [r for r in h100["rows"] if r["id"].startswith("deepep-")]
    assert len(deepep) == 4 and all(abs(r["error"]) < 0.05 for r in deepep)
    assert 0.85 < p["per_domain_alltoall"]["value"] < 0.98 and p["per_domain_alltoall"]["sd"] > 0
    assert all("per_domain_alltoall" not in d["parameters"] for d in data if d["preset_name"] != "calibration_h100")
    h200 = next(d for d in data if d["preset_name"] == "calibration_h200")
    # H200's only all-reduce sweep runs in the switch: it sets the in-switch figures and leaves the copies' unfitted
    assert {"link_nvls", "link_nvls_latency"} <= set(h200["parameters"])
    assert not {"link_intra", "link_intra_latency"} & set(h200["parameters"])
    mi300x = next(d for d in data if d["preset_name"] == "calibration_mi300x")
    # BF16 and FP8 GEMMs, FlashAttention-2, HBM and the xGMI all-reduce sweep: no FlashAttention-3 on MI300X.
    assert set(mi300x["parameters"]) == {"gemm_training_format", "gemm_fp8", "attention", "memory", "link_intra",
                                         "link_intra_latency"}
    assert mi300x["parameters"]["gemm_fp8"]["sd"] > 0.1  # the sweep's scatter, carried as a prediction's spread
    fp8 = h100["parameters"]["gemm_fp8"]
    assert 0.5 < fp8["value"] < 1 and fp8["sd"] is not None and fp8["sd"] > 0


def test_component_benchmarks_are_calibration_data_only(tmp_path: Path) -> None:
    text = COMPONENTS.read_text()
    first = text[text.index("  - id:"):text.index("  - id:", text.index("  - id:") + 1)]
    path = tmp_path / "obs.yaml"
    path.write_text("observations:\n" + first.replace("split: calibration", "split: evaluation"))
    with pytest.raises(InputError, match="a component benchmark is calibration data"):
        load_observations([path])


def test_plain_calibrate_refuses_component_benchmarks(build: Path, tmp_path: Path) -> None:
    res = gp(build, "calibrate", str(COMPONENTS), "--out", str(tmp_path / "c.yaml"))
    assert res.returncode == 2 and not (tmp_path / "c.yaml").exists()
    assert "is a component benchmark" in res.stderr and "--components" in res.stderr


def test_unknown_generation_is_refused_at_its_line(build: Path, tmp_path: Path) -> None:
    text = COMPONENTS.read_text()
    path = tmp_path / "obs.yaml"
    path.write_text(text.replace("generation: h200", "generation: h900"))
    res = gp(build, "calibrate", "--components", str(path), "--out", str(tmp_path))
    assert res.returncode == 2 and "component.generation: no generation `h900`" in res.stderr
    assert str(path) in res.stderr and not list(tmp_path.glob("calibration_*.yaml"))


def test_every_command_applies_a_generation_preset_after_the_end_to_end_calibration(engine: Engine) -> None:
    known = engine.scenarios.presets
    nemo = load_observations([NEMO])[0].run
    a100 = load_observations([NARAYANAN])[0].run
    presets = engine.facts.run_presets(nemo.with_extras(presets=["calibration"]), known)
    assert presets[presets.index("calibration") + 1] == "calibration_h100"
    assert "calibration_h100" not in engine.facts.run_presets(nemo, known)  # only with the end-to-end fit
    assert not {"calibration_a100", "calibration_h100"} & set(
        engine.facts.run_presets(a100.with_extras(presets=["calibration"]), known))  # A100 keeps the end-to-end fit
    # the README run names the end-to-end calibration: its estimate takes the H100 fit
    readme = Engine.load_run(REPO / "runs" / "llama70b_1024xh100.yaml")
    est = engine.estimate(readme, samples=20)
    assert est.presets[est.presets.index("calibration") + 1] == "calibration_h100"
    # and an evaluation row's run with the end-to-end calibration resolves to what validate predicts
    row = next(r for r in engine.validate(NEMO, samples=2).rows if r["id"] == "nemo2407-llama3-70b-64-gpus-v3")
    value = observed_run_value(engine, NEMO, row["id"])
    assert value(row["target"]) == pytest.approx(row["predicted"], rel=1e-9)


def test_a100_narayanan_panel_stays_near_the_issue_bar(engine: Engine) -> None:
    # Issue 15's bar keeps this panel within 5%. It was 4.3% until the output head moved onto the last pipeline
    # stage (stop 25) and the end-to-end calibration refitted with it: 6.0%; NCCL's ring across nodes on every
    # port (stop 26) sped up the small models' data-parallel all-reduces: 6.14%. Both reported, not tuned back.
    # This guards that level against further loss.
    panel = engine.validate(NARAYANAN, samples=2).panels["narayanan2021_table1"]
    assert panel["n"] == 10 and panel["mape"] < 0.0615


def test_fp8_on_an_a100_violates_the_tensor_core_format_constraint(engine: Engine) -> None:
    def violated(gpu: str) -> list[str]:
        scenario = engine.scenarios.build([gpu, "precision_fp8_te_delayed_scaling", "megatron_lm_software",
                                           "estimate_defaults"],
                                          {"kernel.gemm.m": 4096, "kernel.gemm.n": 4096, "kernel.gemm.k": 4096})
        res = engine.resolve("precision.linear.rate_ratio", scenario)
        return [c.name for c in res.violated]

    assert "arith.tc.supports_linear_format" in violated("gpu_a100_sxm")
    assert "arith.tc.supports_linear_format" not in violated("gpu_h100_sxm")


def test_fp8_keeps_two_quantized_weight_copies_in_model_state_memory(engine: Engine) -> None:
    def copies(precision: str) -> float:
        return engine.resolve("precision.bytes_per_param_low_precision_copies",
                              engine.scenarios.build([precision])).value

    # Row-wise and transposed FP8 copies, one byte each per parameter; BF16 keeps none.
    assert copies("precision_bf16_mixed") == 0
    assert copies("precision_fp8_te_delayed_scaling") == pytest.approx(2)


def test_low_precision_share_follows_the_architecture(engine: Engine) -> None:
    # GPT-3 175B at sequence 2048: linear layers 24 h^2 per layer per token (x2 FLOPs), logits 2 V h, attention
    # products 4 s h per layer (causal halves them; here counted by the catalog's own attention FLOPs).
    run = load_observations([NEMO])[0].run
    scenario = engine.facts.run_fields.scenario(engine.scenarios, run.with_extras(presets=["calibration"]))
    share = engine.resolve("precision.mix.low_flop_fraction", scenario).value
    linear = engine.resolve("arch.flops.matmul_fwd_per_token", scenario).value \
        - engine.resolve("arch.flops.logits_fwd_per_token", scenario).value
    attention = engine.resolve("arch.flops.attn_fwd_per_token", scenario).value
    logits = 2 * 51200 * 12288
    assert share == pytest.approx(linear / (linear + logits + attention))
    assert 0.85 < share < 1


# ---- prediction spread of fitted parameters -------------------------------------------------------------

class Rows:
    """Rows of one measured figure for `fit`, each tying the parameters its figure moves with."""

    def __init__(self, figure, xs, measured, params):
        self.rows = [type("Row", (), {"measured": m, "target": "y"})() for m in measured]
        self.params, self.xs, self.figure = params, xs, figure

    def predict(self, theta: np.ndarray) -> np.ndarray:
        return self.figure(theta, self.xs)


def test_a_fitted_scale_carries_the_rows_scatter_and_a_latency_that_of_the_rows_it_sets() -> None:
    """Rows y = e x scatter by +-10% in log about the fit: a new measurement is as far off, so the sd of the
    scale e is its standard error combined with e x 0.1, not the standard error alone (0.1 / sqrt(n) of e).
    In y = x / b + L neither parameter scales every row: the latency L sets the two smallest rows alone and
    takes their 1% scatter; the bandwidth never reaches half of any row and keeps its standard error."""
    xs = np.linspace(1.0, 40.0, 40)
    noise = np.where(np.arange(40) % 2, 0.1, -0.1)
    scaled = fit(Rows(lambda t, x: t[0] * x, xs, 0.7 * xs * np.exp(noise),
                      (Parameter("scale", ("e",), 0.5, 0.01, 1.0),)))
    e, sd = scaled.values["scale"], scaled.sds["scale"]
    standard_error = e * 0.1 / np.sqrt(40)
    assert e == pytest.approx(0.7, rel=1e-3)
    assert sd == pytest.approx(np.hypot(standard_error, e * 0.1 * np.sqrt(40 / 39)), rel=0.02)
    assert sd > 5 * standard_error
    timed_scale = fit(Rows(lambda t, x: x / t[0], xs, xs / 0.7 * np.exp(noise),
                           (Parameter("scale", ("e",), 0.5, 0.01, 1.0),)))  # a time: elasticity -1
    assert timed_scale.sds["scale"] == pytest.approx(sd, rel=0.02)

    latency = Parameter("latency", ("L",), 1.0, 0.0, 100.0)
    bandwidth = Parameter("bandwidth", ("b",), 1.0, 0.1, 100.0)
    timed = fit(Rows(lambda t, x: x / t[1] + t[0], xs, (xs / 4 + 10) * np.exp(noise / 10),
                     (latency, bandwidth)))
    assert timed.values["latency"] == pytest.approx(10, rel=0.05)
    # L / (x / b + L) >= 0.95 for x = 1, 2 only; x / (x + b L) <= 0.5 for every row
    assert 0.01 * 10 <= timed.sds["latency"] < 0.012 * 10
    assert timed.sds["bandwidth"] < 0.01 * 4


def test_links_tied_by_shared_rows_each_carry_the_scatter_of_the_rows_they_alone_set() -> None:
    """One link's rows scatter +-10%, another's +-2%, and rows crossing both tie them into one block where no
    parameter scales every row: each bandwidth takes its own rows' scatter, not the fit's standard error."""
    xs = np.linspace(1.0, 40.0, 10)
    wide, narrow = np.where(np.arange(10) % 2, 0.1, -0.1), np.where(np.arange(10) % 2, 0.02, -0.02)
    links = fit(Rows(lambda t, x: np.concatenate([x / t[0], x / t[1], x / t[0] + x / t[1]]), xs,
                     np.concatenate([xs / 4 * np.exp(wide), xs / 9 * np.exp(narrow), xs / 4 + xs / 9]),
                     (Parameter("inter", ("b1",), 1.0, 0.1, 100.0), Parameter("intra", ("b2",), 1.0, 0.1, 100.0))))
    assert links.values["inter"] == pytest.approx(4, rel=0.01) and links.values["intra"] == pytest.approx(9, rel=0.01)
    # each combines its standard error (0.06 and 0.17 from the pooled fit) with its own rows' scatter
    assert links.sds["inter"] == pytest.approx(float(np.hypot(0.064, 4 * 0.1)), rel=0.02)
    assert links.sds["intra"] == pytest.approx(float(np.hypot(0.168, 9 * 0.02)), rel=0.02)


def test_a_roofline_row_ties_only_the_ceiling_it_sits_under() -> None:
    """Rows y = x min(e, m I): compute-bound rows (large I) move with e alone, a memory-bound one (small I) with m
    alone, like the streaming rows y = m. No row ties the two, so each takes its own rows' scatter."""
    xs = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 0.001, 0.0, 0.0, 0.0])  # I of the seven GEMM-like rows
    noise = np.array([0.05, -0.05, 0.05, -0.05, 0.05, -0.05, 0.0, 0.02, -0.02, 0.0])

    def figure(t, x):
        return np.concatenate([10 * x[:7] * np.minimum(t[0], t[1] * 100 * x[:7]), np.full(3, t[1])])

    truth = figure(np.array([0.7, 0.9]), xs)
    roof = fit(Rows(figure, xs, truth * np.exp(noise), (Parameter("e", ("e",), 0.5, 0.05, 1.0),
                                                        Parameter("m", ("m",), 0.5, 0.05, 1.0))))
    assert roof.values["e"] == pytest.approx(0.7, rel=0.05) and roof.values["m"] == pytest.approx(0.9, rel=0.05)
    assert roof.depends == [frozenset({"e"})] * 6 + [frozenset({"m"})] * 4
    assert not roof.exact and roof.sds["e"] > 0 and roof.sds["m"] > 0


# ---- activations the linear layers keep for their weight gradients -----------------------------------

ACT = ["arch.hidden=8192", "arch.q_dim=8192", "arch.ffn.active_width=28672", "par.tp=4", "par.sp=1",
       "par.act.tokens_per_microbatch=8192 token", "precision.bytes_per_activation=2 B"]


@pytest.mark.parametrize(("bits", "saved_bytes"), [(16, 0), (8, 1)])
def test_fp8_linear_layers_keep_their_inputs_at_one_byte(real_engine: Engine, bits: int, saved_bytes: int) -> None:
    # Llama 3 70B at tp 4 with sequence parallelism: the QKV and first-MLP inputs (h each, split 4 ways), the
    # output projection's input (a d_h / 4) and the last MLP matrix's input (d_ff / 4) at 1 byte instead of 2
    assign = ACT + [f"precision.linear.storage_bits={bits}"]
    saving = real_engine.value("par.act.linear_input_saving_per_token", assign=assign)
    assert saving == pytest.approx((2 * 8192 / 4 + (8192 + 28672) / 4) * saved_bytes, rel=1e-12)
    layer = ["arch.act.replicated_bytes_per_token_per_layer=65536 B/token",
             "arch.act.attn_bytes_per_token_per_layer=36864 B/token",
             "arch.act.ffn_bytes_per_token_per_layer=172032 B/token", "par.recompute.mode=0", "kernel.attn.flash=1",
             "par.act.module_recompute_saving_per_token=0 B/token"]
    stored = real_engine.value("par.act.bytes_per_layer", assign=assign + layer)
    assert stored == pytest.approx(8192 * (65536 / 4 + (36864 + 172032) / 4 - saving), rel=1e-12)
