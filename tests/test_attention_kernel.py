"""Attention kernel efficiency by sequence length, mask, head dimension and kernel (FlashAttention-2 or -3), and
its component calibration from the FlashAttention-3 paper's benchmark figure (calibration data only)."""

from __future__ import annotations

import pytest
from helpers import REPO

from gpustack_sim import Engine
from gpustack_sim.engine.run_file import load_run

H100 = ["gpu_h100_sxm", "precision_bf16_mixed", "megatron_lm_software", "estimate_defaults", "calibration_h100"]
SEQS = [512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072]
# One score's exponential against its matmul work at head dimension 128 on H100: 132 SMs x 4096 FLOP/clk x
# 1.83 GHz of matmul against 3.9 T exponentials per second, 4 d FLOPs per score in the forward pass.
EXP_RATIO_128 = 132 * 4096 * 1.83e9 / (2 * (128 + 128) * 3.9e12)


def scenario(engine: Engine, seq: int, head_dim: int = 128, causal: bool = False, kernel: int = 3):
    return engine.scenarios.build(H100, {
        "arch.seq_len": f"{seq} token", "arch.head_dim": head_dim, "arch.attn.qk_head_dim": head_dim,
        "arch.attn.context_fraction": 0.5 if causal else 1, "arch.attn.causal": int(causal), "kernel.attn.flash": 1,
        "kernel.attn.fa_version": kernel})


def efficiency(engine: Engine, seq: int, head_dim: int = 128, causal: bool = False, kernel: int = 3) -> float:
    return engine.resolve("kernel.attn.efficiency", scenario(engine, seq, head_dim, causal, kernel)).value


@pytest.mark.parametrize("kernel", [2, 3])
def test_efficiency_rises_with_sequence_length_and_saturates(engine: Engine, kernel: int) -> None:
    for causal in (False, True):
        effs = [efficiency(engine, n, causal=causal, kernel=kernel) for n in SEQS]
        assert all(b >= a for a, b in zip(effs, effs[1:])), effs
        assert effs[0] < 0.9 * effs[-1]  # short sequences lose to the HBM roofline and per-block work
        assert effs[-1] - effs[-3] < 0.01 * effs[-1]  # from 32k on, saturated


def test_long_sequence_limit_by_hand(engine: Engine) -> None:
    # FlashAttention-3, head dimension 128, no mask, 128k keys: e * L / (L + o) / (1 + phi * peak / (4 d R_exp)).
    s = scenario(engine, 131072)
    e, o, phi = (engine.resolve(n, s).value for n in (
        "kernel.attn.efficiency_large_fa3", "kernel.attn.overhead_tokens_fa3", "kernel.attn.exp_exposed_fa3"))
    ratio = EXP_RATIO_128
    expected = e * 131072 / (131072 + o) / (1 + phi * ratio)
    assert efficiency(engine, 131072) == pytest.approx(expected, rel=1e-6)


def test_causal_mask_halves_the_keys_each_query_block_visits(engine: Engine) -> None:
    for kernel in (2, 3):
        for n in (512, 2048, 8192):
            assert efficiency(engine, n, causal=True, kernel=kernel) < efficiency(engine, n, kernel=kernel)
            # Causal query block i of n at 2N visits i key blocks (B_r = 128), (n + 1)/2 on average: N keys and
            # half a block, a little more loop work, and about as many bytes per FLOP, as an unmasked one at N.
            keys = engine.resolve("kernel.attn.kv_tokens_per_query_block", scenario(engine, 2 * n, causal=True,
                                                                                    kernel=kernel)).value
            assert keys == pytest.approx(n + 64, rel=1e-12)
            causal, full = efficiency(engine, 2 * n, causal=True, kernel=kernel), efficiency(engine, n, kernel=kernel)
            assert full <= causal < full * (1 + 2 * 128 / n)


def executed(engine: Engine, seq: int, causal: int = 1, fraction: float = 1, flash: int = 1) -> float:
    s = engine.scenarios.build(H100, {"arch.seq_len": f"{seq} token", "arch.head_dim": 128, "arch.attn.qk_head_dim": 128,
                                      "arch.attn.context_fraction": fraction, "arch.attn.causal": causal,
                                      "kernel.attn.flash": flash, "kernel.attn.fa_version": 2})
    return engine.resolve("kernel.attn.executed_fraction", s).value


def test_executed_fraction_at_small_n_by_hand(engine: Engine) -> None:
    # n = ceil(s / 128) square tiles per side, n (n + 1) / 2 of the n^2 on or below the diagonal: (1 + 1/n)/2.
    assert executed(engine, 128) == pytest.approx(1.0)  # one tile: the diagonal, computed in full
    assert executed(engine, 256) == pytest.approx(3 / 4)
    assert executed(engine, 300) == pytest.approx(2 / 3)  # a partial last tile still costs a tile
    assert executed(engine, 512) == pytest.approx(5 / 8)
    assert executed(engine, 512, fraction=0.5) == pytest.approx(5 / 8)  # whatever the credited convention
    assert executed(engine, 512, fraction=0.1) == pytest.approx(0.1 + 1 / 4)  # narrower pattern + diagonal tiles
    assert executed(engine, 512, causal=0) == pytest.approx(1.0)  # no mask: the whole matrix
    assert executed(engine, 512, causal=0, fraction=0.5) == pytest.approx(0.5)
    assert executed(engine, 512, flash=0) == pytest.approx(1.0)  # standard attention computes, then masks


def test_benchmark_rate_credits_the_convention_over_the_executed_time(engine: Engine) -> None:
    # Shah et al. credit a causal run with half the full-matrix FLOPs; the kernel executes (1 + 1/n)/2 of it.
    s = scenario(engine, 512, causal=True, kernel=2)
    rate = engine.resolve("kernel.attn.achieved_flops", s).value * 1e12  # declared in TFLOP/s
    peak, eff = (engine.resolve(n, s).value for n in ("gpu.peak_flops", "kernel.attn.efficiency"))
    assert rate == pytest.approx(peak * eff * 0.5 / (5 / 8), rel=1e-9)
    u = scenario(engine, 512, kernel=2)
    assert engine.resolve("kernel.attn.achieved_flops", u).value * 1e12 == pytest.approx(
        engine.resolve("gpu.peak_flops", u).value * engine.resolve("kernel.attn.efficiency", u).value, rel=1e-9)


def test_a_causal_run_spends_half_the_attention_time_for_the_same_model_flops(engine: Engine) -> None:
    values = {}
    for causal in (True, False):
        spec = load_run(REPO / "runs" / "llama70b_1024xh100.yaml",
                        ["model.seq_len=65536", f"model.causal={str(causal).lower()}"])
        s = engine.facts.run_fields.scenario(engine.scenarios, spec)
        values[causal] = {n: engine.resolve(n, s).value for n in (
            "kernel.step.t_attention", "kernel.step.attn_flops", "arch.flops.step_model", "kernel.attn.executed_fraction",
            "arch.attn.causal")}
    causal, full = values[True], values[False]
    assert causal["arch.attn.causal"] == 1 and full["arch.attn.causal"] == 0
    assert causal["kernel.attn.executed_fraction"] == pytest.approx((1 + 1 / 512) / 2)
    assert causal["arch.flops.step_model"] == full["arch.flops.step_model"]  # the MFU numerator: credited FLOPs
    assert causal["kernel.step.attn_flops"] == pytest.approx(full["kernel.step.attn_flops"] * (1 + 1 / 512) / 2)
    ratio = full["kernel.step.t_attention"] / causal["kernel.step.t_attention"]
    assert 1.9 < ratio < 2.05, ratio  # the kernel saturates at this length: time follows the executed FLOPs


def test_flashattention3_gains_with_head_dimension_and_flashattention2_does_not(engine: Engine) -> None:
    fa3 = [efficiency(engine, 16384, head_dim=d) for d in (64, 128, 256)]
    assert fa3[0] < fa3[1] < fa3[2]  # the exponentials weigh less against 4d matmul FLOPs per score
    fa2 = [efficiency(engine, 16384, head_dim=d, kernel=2) for d in (64, 128, 256)]
    assert fa2[0] == pytest.approx(fa2[1], rel=1e-9) and fa2[1] == pytest.approx(fa2[2], rel=1e-9)
    assert fa2[1] < fa3[1]


def test_unfused_attention_keeps_its_own_efficiency(engine: Engine) -> None:
    # Standard attention (the A100 Megatron rows) never takes the fused kernels' overhead or softmax terms.
    s = engine.scenarios.build(["gpu_a100_sxm", "precision_bf16_mixed", "megatron_lm_software", "estimate_defaults",
                                "calibration"], {"arch.seq_len": "2048 token", "arch.head_dim": 128,
                                                 "arch.attn.qk_head_dim": 128, "arch.attn.context_fraction": 1,
                                                 "arch.attn.causal": 1, "kernel.attn.flash": 0})
    res = engine.resolve("kernel.attn.efficiency", s)
    ridge = engine.resolve("gpu.peak_flops", s).value / engine.resolve("mem.hbm.bandwidth", s).value
    intensity = 2 * 2048**2 * 256 / (2 * (2048 * 2 * 256 + 4 * 2048**2))
    large = engine.resolve("kernel.attn.efficiency_large", s).value
    assert res.value == pytest.approx(large * min(1, intensity / ridge), rel=1e-6)


def test_run_file_names_its_attention_kernel(engine: Engine) -> None:
    run = load_run(REPO / "runs" / "llama70b_1024xh100.yaml")
    assert run.kernels.attention == "flash_attention_2"
    fa3 = load_run(REPO / "runs" / "llama70b_1024xh100.yaml", ["kernels.attention=flash_attention_3"])
    cudnn = load_run(REPO / "runs" / "llama70b_1024xh100.yaml", ["kernels.attention=cudnn_fused_attention"])
    for spec, code in ((run, 2), (fa3, 3), (cudnn, 4)):
        s = engine.facts.run_fields.scenario(engine.scenarios, spec)
        assert engine.resolve("kernel.attn.fa_version", s).value == code


@pytest.fixture(scope="module")
def h100_fit(engine: Engine) -> dict:
    fits = {c.preset: c for c in engine.calibrate_components()}
    return {r["id"]: r for r in fits["calibration_h100"].rows}


def test_fitted_model_reproduces_the_kernel_benchmarks(h100_fit: dict) -> None:
    # The rows in force are the restatements with the mask stated (-v2); the rows they supersede are skipped.
    rows = {i.removesuffix("-v2"): r for i, r in h100_fit.items() if i.startswith("shah2024-fig5-fa")}
    assert len(rows) == 71 and all(i.endswith("-v2") for i in h100_fit if i.startswith("shah2024-fig5-fa"))
    errors = [abs(r["error"]) for r in rows.values()]
    # Stated tolerances: FlashAttention-3 within 11% from 4k on at every head dimension and mask; all 71 rows
    # within 12% on average. The short causal rows (512 to 2k) are the worst: a hard roofline and a fixed
    # per-block overhead do not follow their shape closely (up to about 40%).
    long_fa3 = [abs(r["error"]) for i, r in rows.items() if "-fa3-" in i and int(i.rsplit("-s", 1)[1]) >= 4096]
    assert len(long_fa3) == 18 and max(long_fa3) < 0.11
    assert sum(errors) / len(errors) < 0.12 and max(errors) < 0.40
    # Unmasked FlashAttention-2 at head dimension 64 and 256 saturates where the fit says (the worst, head dimension
    # 64 at 1k, 6.0% before the causal rows were charged their diagonal tiles, 7.0% since: the shared long-sequence
    # efficiency rose 1% to meet the causal rows it now predicts lower).
    fa2 = [abs(r["error"]) for i, r in rows.items() if "-fa2-" in i and "noncausal" in i and "hd128" not in i]
    assert max(fa2) < 0.075


def test_flash_backward_recomputes_one_of_the_two_forward_matmuls(engine: Engine) -> None:
    # FlashAttention's backward runs 5 matmuls against the forward's 2 (2.5x the forward FLOPs, the convention
    # its benchmarks are counted in): the step charges the forward, twice it for the gradients, and half of it
    # recomputed; selective recomputation reruns the whole forward on top.
    for recompute, flash, factor in (("none", True, 0.5), ("selective", True, 1.5), ("selective", False, 1.0),
                                     ("none", False, 0.0), ("full", True, 1.5)):
        spec = load_run(REPO / "runs" / "llama70b_1024xh100.yaml",
                        [f"layout.recompute={recompute}", f"kernels.flash_attention={str(flash).lower()}"])
        s = engine.facts.run_fields.scenario(engine.scenarios, spec)
        fwd = engine.resolve("arch.flops.attn_fwd_per_token", s).value
        assert engine.resolve("par.recompute.attn_flops_per_token", s).value == pytest.approx(factor * fwd, rel=1e-12)


def test_backward_kernels_by_hand(engine: Engine) -> None:
    # No mask, 16k keys, head dimension 128 (compute-bound: no roofline cap). FlashAttention-3's backward: its
    # forward's long-sequence efficiency times its own ratio, its own per-block work, and the recomputed
    # exponential against five matmuls, 2/5 of the forward's exponential-to-matmul time ratio when d_qk = d_v.
    s = scenario(engine, 16384)
    e, r, o, phi = (engine.resolve(n, s).value for n in (
        "kernel.attn.efficiency_large_fa3", "kernel.attn.bwd_ratio_fa3", "kernel.attn.overhead_tokens_bwd_fa3",
        "kernel.attn.exp_exposed_bwd_fa3"))
    ratio = EXP_RATIO_128 * 2 / 5
    assert engine.resolve("kernel.attn.exp_time_ratio_bwd", s).value == pytest.approx(ratio, rel=1e-6)
    expected = e * r * 16384 / (16384 + o) / (1 + phi * ratio)
    assert engine.resolve("kernel.attn.efficiency_bwd", s).value == pytest.approx(expected, rel=1e-6)
    s2 = scenario(engine, 16384, kernel=2)
    e2, r2, o2 = (engine.resolve(n, s2).value for n in (
        "kernel.attn.efficiency_large", "kernel.attn.bwd_ratio_fa2", "kernel.attn.overhead_tokens_bwd_fa2"))
    assert engine.resolve("kernel.attn.efficiency_bwd", s2).value == pytest.approx(e2 * r2 * 16384 / (16384 + o2),
                                                                                  rel=1e-6)
    # Shah et al. Figures 5 and 6: both kernels run their backward slower than their forward.
    for sc in (s, s2):
        assert engine.resolve("kernel.attn.efficiency_bwd", sc).value < engine.resolve("kernel.attn.efficiency",
                                                                                       sc).value


@pytest.mark.parametrize("recompute, flash, share", [("none", True, 2.5 / 3.5), ("selective", True, 2.5 / 4.5),
                                                     ("full", True, 2.5 / 4.5), ("none", False, 2 / 3)])
def test_step_attention_time_charges_each_pass_its_kernel(engine: Engine, recompute: str, flash: bool,
                                                          share: float) -> None:
    spec = load_run(REPO / "runs" / "llama70b_1024xh100.yaml",
                    [f"layout.recompute={recompute}", f"kernels.flash_attention={str(flash).lower()}"])
    s = engine.facts.run_fields.scenario(engine.scenarios, spec)
    v = {n: engine.resolve(n, s).value for n in ("kernel.step.attn_bwd_share", "kernel.step.attn_flops",
                                                  "gpu.peak_flops", "kernel.attn.efficiency",
                                                  "kernel.attn.efficiency_bwd", "kernel.step.t_attention")}
    assert v["kernel.step.attn_bwd_share"] == pytest.approx(share, rel=1e-12)
    expected = v["kernel.step.attn_flops"] / v["gpu.peak_flops"] * (
        (1 - share) / v["kernel.attn.efficiency"] + share / v["kernel.attn.efficiency_bwd"])
    assert v["kernel.step.t_attention"] == pytest.approx(expected, rel=1e-9)
    if not flash:  # standard attention's backward runs the same separate kernels as its forward
        assert v["kernel.attn.efficiency_bwd"] == v["kernel.attn.efficiency"]


def test_mla_backward_recomputes_the_wider_query_key_products(engine: Engine) -> None:
    # MLA's query-key heads (128 + 64 rope) are wider than its 128-wide value heads: the scores take 192 / 320 of
    # the forward products, and the backward kernel recomputes them on top of twice the forward (2.6 x, not 2.5 x).
    spec = load_run(REPO / "runs" / "llama70b_1024xh100.yaml", [
        "layout.recompute=none", "model.kv_heads=64", "model.mla={kv_lora_rank: 512, q_lora_rank: 1536, "
        "qk_rope_head_dim: 64, qk_nope_head_dim: 128, v_head_dim: 128}"])
    s = engine.facts.run_fields.scenario(engine.scenarios, spec)
    share = 192 / 320
    assert engine.resolve("arch.attn.qk_flops_share", s).value == pytest.approx(share, rel=1e-12)
    fwd = engine.resolve("arch.flops.attn_fwd_per_token", s).value
    assert engine.resolve("par.recompute.attn_flops_per_token", s).value == pytest.approx(share * fwd, rel=1e-12)
    assert engine.resolve("kernel.step.attn_bwd_share", s).value == pytest.approx((2 + share) / (3 + share),
                                                                                  rel=1e-12)


def test_fitted_model_reproduces_the_backward_benchmarks(h100_fit: dict) -> None:
    rows = {i: r for i, r in h100_fit.items() if i.startswith("shah2024-fig6-fa")}
    assert len(rows) == 24
    errors = [abs(r["error"]) for r in rows.values()]
    # Stated tolerances: FlashAttention-3's backward within 5% at every length and head dimension; all 24 rows
    # within 11% and 4% on average (FlashAttention-2's backward, like its forward, has no head-dimension term:
    # head dimension 64 and 128 get one curve, about 5% above the first and below the second).
    assert max(abs(r["error"]) for i, r in rows.items() if "-fa3-" in i) < 0.05
    assert max(errors) < 0.11 and sum(errors) / len(errors) < 0.04


def test_fitted_model_reproduces_the_cudnn_benchmarks(h100_fit: dict) -> None:
    fwd = {i: r for i, r in h100_fit.items() if i.startswith("shah2024-fig5-cudnn-")}
    bwd = {i: r for i, r in h100_fit.items() if i.startswith("shah2024-fig6-cudnn-")}
    assert len(fwd) == 30 and len(bwd) == 12
    # Stated tolerances. Training runs the causal kernel: at head dimension 128 from 2k on within 6%. The backward
    # within 4% everywhere. FlashAttention-3's form fits cuDNN's forward loosely elsewhere (its unmasked head
    # dimension 256 is slower than 128, which no exponential term gives): within 30%, 11% on average.
    causal128 = [abs(r["error"]) for i, r in fwd.items()
                 if "-hd128-causal-" in i and int(i.rsplit("-s", 1)[1]) >= 2048]
    assert len(causal128) == 4 and max(causal128) < 0.06
    assert max(abs(r["error"]) for r in bwd.values()) < 0.04
    errors = [abs(r["error"]) for r in fwd.values()]
    assert max(errors) < 0.30 and sum(errors) / len(errors) < 0.11


def test_a_ring_splits_each_query_blocks_keys_over_its_steps(engine: Engine) -> None:
    # Ring context parallelism computes each step against one rank's key/value block, a separate kernel call:
    # the loop a query block runs per call is cp times shorter, and each call pays the fixed per-block work again.
    # All-gathered keys and values keep one call per query chunk over every key.
    values = {}
    for comm in ("ring", "all_gather"):
        spec = load_run(REPO / "runs" / "llama70b_1024xh100.yaml", ["layout.cp=4", "layout.dp=8",
                                                                     f"layout.cp_comm={comm}",
                                                                     "kernels.attention=cudnn_fused_attention"])
        s = engine.facts.run_fields.scenario(engine.scenarios, spec)
        values[comm] = {n: engine.resolve(n, s).value for n in (
            "kernel.attn.kv_splits", "kernel.attn.kv_tokens_per_query_block", "kernel.attn.executed_fraction",
            "arch.seq_len", "kernel.attn.efficiency_bwd", "kernel.step.t_attention")}
    ring, gather = values["ring"], values["all_gather"]
    assert ring["kernel.attn.kv_splits"] == 4 and gather["kernel.attn.kv_splits"] == 1
    assert ring["kernel.attn.kv_tokens_per_query_block"] == pytest.approx(
        ring["kernel.attn.executed_fraction"] * ring["arch.seq_len"] / 4, rel=1e-12)
    assert gather["kernel.attn.kv_tokens_per_query_block"] == pytest.approx(
        4 * ring["kernel.attn.kv_tokens_per_query_block"], rel=1e-12)
    assert ring["kernel.attn.efficiency_bwd"] < gather["kernel.attn.efficiency_bwd"]
    assert ring["kernel.step.t_attention"] > gather["kernel.step.t_attention"]


@pytest.mark.parametrize("recompute", ["none", "selective"])
def test_a_ring_merges_its_steps_partial_outputs_in_hbm(engine: Engine, recompute: str) -> None:
    # Transformer Engine's ring around the attention kernels, per token of a rank and layer, averaged over the
    # c ranks: forward K/V into the ring buffer (2 kv), the merged outputs ((9c - 1)/4 q) and FP32 log-sum-exp
    # corrections ((15c + 1) bytes per head); backward (9c + 7)/4 kv and (9c - 1)/4 q, 4 (c - 1)/c bytes per head.
    # Llama-2/3-70B shape at tp 8: q = 8192 / 8, kv = 2 x 1024 / 8 values of 2 bytes, 64 / 8 heads. A recomputed
    # forward repeats the forward's share; without context parallelism, or with all-gathered keys and values,
    # nothing is merged.
    def merge(cp: int, comm: str) -> float:
        spec = load_run(REPO / "runs" / "llama70b_1024xh100.yaml", [f"layout.cp={cp}", f"layout.dp={32 // cp}",
                                                                     f"layout.cp_comm={comm}",
                                                                     f"layout.recompute={recompute}"])
        s = engine.facts.run_fields.scenario(engine.scenarios, spec)
        return engine.resolve("kernel.attn.cp_merge_bytes_per_token_per_layer", s).value

    q, kv, heads = 1024, 256, 8
    forward_passes = 2 if recompute == "selective" else 1
    for c in (2, 4):
        fwd = ((9 * c - 1) / 4 * q + 2 * kv) * 2 + (15 * c + 1) * heads
        bwd = ((9 * c - 1) / 4 * q + (9 * c + 7) / 4 * kv) * 2 + 4 * (c - 1) / c * heads
        assert merge(c, "ring") == pytest.approx(forward_passes * fwd + bwd, rel=1e-12)
        assert merge(c, "all_gather") == 0
    assert merge(1, "ring") == 0
