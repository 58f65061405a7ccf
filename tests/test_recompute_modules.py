"""Issue 15 item 3 (architecture and recipe as run-file fields): module-level recomputation, Megatron-Core's
recompute_modules mla_up_proj and mlp. Expected values are worked out here by hand from DeepSeek-V3's shapes
and the modules' descriptions, never read back from the catalog."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from helpers import REPO, Engine, observed_run_value, run_cli_here

README_RUN = REPO / "runs" / "llama70b_1024xh100.yaml"

MLA = ["arch.n_heads=128", "arch.mla.q_lora_rank=1536", "arch.mla.kv_lora_rank=512", "arch.mla.qk_nope_head_dim=128",
       "arch.mla.rope_head_dim=64", "arch.head_dim=128"]
MLA_VARIANTS = ["arch.params.attn_up_projections=mla", "arch.attn.qk_head_dim=mla",
                "arch.attn.kv_elements_per_token_per_layer=mla"]
# W^UQ with W^QR: 128 heads x (128 + 64) x 1536; W^UK with W^UV: 128 x (128 + 128) x 512
UP = 128 * 192 * 1536 + 128 * 256 * 512


def test_mla_up_projections_count_the_query_key_and_value_factors(real_engine: Engine) -> None:
    up = real_engine.value("arch.params.attn_up_projections", assign=MLA, variants=MLA_VARIANTS)
    assert up == UP
    assert real_engine.value("arch.params.attn_up_projections", variants=["arch.params.attn_up_projections=gqa"]) == 0


@pytest.mark.parametrize(("mla", "mlp", "expected"), [
    (0, 0, 0.0),
    (1, 0, 2 * 61 * UP),
    # the three dense SwiGLU blocks of 3 x 7168 x 18432 parameters
    (1, 1, 2 * (61 * UP + 3 * 3 * 7168 * 18432)),
])
def test_recomputed_modules_rerun_their_forward_matmuls(real_engine: Engine, mla: int, mlp: int,
                                                        expected: float) -> None:
    assign = [f"par.recompute.mla_up_proj={mla}", f"par.recompute.dense_mlp={mlp}", "arch.n_layers=61",
              f"arch.params.attn_up_projections={UP}", f"arch.params.ffn_dense_total={3 * 3 * 7168 * 18432}"]
    assert real_engine.value("par.recompute.module_flops_per_token", assign=assign) == pytest.approx(expected,
                                                                                                    rel=1e-12)


SAVING = MLA + ["arch.n_layers=61", "par.tp=2", "precision.bytes_per_activation=2 B", "arch.ffn_hidden=18432",
                "arch.ffn.n_matrices=3", "arch.params.ffn_dense_per_layer=1", "arch.params.ffn_dense_total=3",
                "precision.linear.operand_bytes=1 B"]


@pytest.mark.parametrize(("mla", "mlp", "expected"), [
    (0, 0, 0.0),
    # queries 128 x 192, keys 128 x 192 and values 128 x 128 at 2 bytes, split over tp 2
    (1, 0, (128 * 192 + 128 * 320) * 2 / 2),
    # and in 3 of 61 layers the SwiGLU block's gate, up (2 bytes) and product (kept at FP8 for the last matrix)
    (1, 1, ((128 * 192 + 128 * 320) * 2 + 3 / 61 * 18432 * (2 + 2 + 1)) / 2),
])
def test_recomputed_modules_no_longer_keep_their_outputs(real_engine: Engine, mla: int, mlp: int,
                                                         expected: float) -> None:
    saving = real_engine.value("par.act.module_recompute_saving_per_token",
                               assign=SAVING + [f"par.recompute.mla_up_proj={mla}", f"par.recompute.dense_mlp={mlp}"],
                               variants=[v for v in MLA_VARIANTS if "up_projections" not in v])
    assert saving == pytest.approx(expected, rel=1e-12)


def test_recompute_time_is_the_modules_forward_gemms(real_engine: Engine) -> None:
    assign = ["par.pipeline.n_microbatches=4", "par.pipeline.layers_per_stage=8", "par.recompute.mode=0",
              "par.recompute.mla_up_proj=1", "par.recompute.dense_mlp=1", "kernel.layer.qkv.t_fwd=0.001 s",
              "arch.params.attn_up_projections=30", "arch.params.attn_per_layer=110", "arch.hidden=10",
              "arch.q_dim=5", "arch.params.ffn_dense_total=600", "arch.n_layers=60",
              "par.act.tokens_per_microbatch=4096 token", "par.tp=2", "kernel.linear.peak_flops=1e15 FLOP/s",
              "kernel.layer.fc1.efficiency=0.5"]
    t = real_engine.value("kernel.step.t_recompute_modules", assign=assign, base_units=True)
    # per micro-batch and layer: 30 of the 60 input-projection parameters' 1 ms, and 10 dense-MLP parameters
    # per layer x 2 x 4096 tokens / tp 2 at half of 1 PFLOP/s
    assert t == pytest.approx(4 * 8 * (0.001 * 30 / 60 + 10 * 2 * 4096 / 2 / 0.5e15), rel=1e-12)


def _deepseek(tmp_path: Path, modules: dict | None) -> Path:
    data = yaml.safe_load(README_RUN.read_text())
    data["model"].update({"layers": 61, "hidden": 7168, "ffn_hidden": 18432, "heads": 128, "vocab": 129280,
                          "seq_len": 4096,
                          "moe": {"experts": 256, "top_k": 8, "shared_experts": 1, "expert_ffn_hidden": 2048,
                                  "dense_layers": 3},
                          "mla": {"kv_lora_rank": 512, "q_lora_rank": 1536, "qk_rope_head_dim": 64,
                                  "qk_nope_head_dim": 128, "v_head_dim": 128}})
    data["model"].pop("kv_heads")
    # interleave given: left to the estimate, the leaner run would be timed at a larger interleave it fits
    data["layout"] = {"tp": 1, "pp": 16, "dp": 64, "ep": 64, "micro_batch": 1, "global_batch": 1024,
                      "first_stage_layers": 3, "last_stage_layers": 2, "ep_overlap": "dualpipe", "zero_stage": 1,
                      "interleave": 1}
    if modules is not None:
        data["layout"]["recompute_modules"] = modules
    path = tmp_path / f"deepseek_{len(modules or {})}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _estimate(path: Path) -> dict:
    res = run_cli_here("estimate", str(path), "--samples", "2", "--json", "--trace", "step time")
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def test_a_run_trades_step_time_for_activation_memory(tmp_path: Path) -> None:
    plain = _estimate(_deepseek(tmp_path, None))
    lean = _estimate(_deepseek(tmp_path, {"mla_up_proj": True, "mlp": True}))
    step = [d["figures"][0]["value"] for d in (plain, lean)]
    act = [d["memory"]["breakdown"]["par.memory.activations"]["value"] for d in (plain, lean)]
    assert step[1] > step[0] and act[1] < act[0]
    rerun = next(s for s in lean["traces"]["training.t_step"] if s["variable"] == "kernel.step.t_recompute_modules")
    assert rerun["value"] > 0


def test_a_sweep_rejects_full_recomputation_beside_recomputed_modules(tmp_path: Path) -> None:
    path = _deepseek(tmp_path, {"mla_up_proj": True})
    res = run_cli_here("sweep", str(path), "--grid", "recompute=none,full", "--json")
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert data["skipped"] == {"recomputed modules with full recomputation": 1} and data["evaluated"] == 1
    assert [row["recompute"] for row in data["top"]] == ["none"]


AUTOMODEL = REPO / "data" / "observations" / "automodel_dgx_h100.yaml"


def test_full_recomputation_dispatches_and_combines_again(engine) -> None:
    # Qwen3 30B-A3B on AutoModel recomputes every block: per micro-batch and MoE layer a dispatch and a combine in
    # the forward, again in the rerun forward, and their two transposes in the backward: six all-to-alls, not four.
    value = observed_run_value(engine, AUTOMODEL, "automodel-qwen3-30b-a3b-8-gpus")
    assert value("par.recompute.forward_passes") == 2
    per_layer = value("arch.moe.n_moe_layers") / value("par.pp") * value("par.pipeline.n_microbatches")
    # the step total is declared in ms, one all-to-all in us
    assert value("col.ep.t_step") == pytest.approx(6 * per_layer * value("col.ep.t_alltoall") / 1000, rel=1e-12)
