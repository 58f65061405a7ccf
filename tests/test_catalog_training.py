"""Issue 6's correctness checks: pipelines, collectives, FLOPs conventions, KV cache, reliability and
money, each through the real resolver."""

from __future__ import annotations

import pytest
from helpers import FIXTURE, Engine

PIPE = ["par.pp=8", "arch.global_batch=8", "par.dp=1", "par.micro_batch=1"]
ONE_F_ONE_B = ["par.pipeline.bubble_fraction=interleaved_1f1b", "par.pipeline.microbatches_per_schedule=one_schedule"]


def test_1f1b_bubble_makes_the_step_15_8_of_bubble_free(real_engine: Engine) -> None:
    bubble_free = real_engine.value("training.t_step", [FIXTURE], ["training.t_exposed_comm=0 s"], base_units=True)
    piped = real_engine.value("training.t_step", [FIXTURE],
                              PIPE + ["par.pp_interleave=1", "training.t_exposed_comm=0 s"], ONE_F_ONE_B,
                              base_units=True)
    assert piped / bubble_free == pytest.approx(15 / 8, rel=1e-12)


@pytest.mark.parametrize("v", [1, 2, 3, 4])
def test_interleaving_shrinks_the_bubble_by_v(real_engine: Engine, v: int) -> None:
    frac = real_engine.value("par.pipeline.bubble_fraction", assign=PIPE + [f"par.pp_interleave={v}"],
                     variants=ONE_F_ONE_B, base_units=True)
    assert frac == pytest.approx((8 - 1) / (8 * v), rel=1e-12)


def test_ring_allreduce_alpha_beta(real_engine: Engine) -> None:
    n, p, alpha, beta = 1e9, 8, 10e-6, 0.01 / 1e9
    t = real_engine.value("col.dp.t_allreduce_ring", assign=[
        "col.dp.message=1000 MB", f"col.dp.group_size={p}", "col.dp.alpha=10 us", "col.dp.beta=0.01 s/GB"], base_units=True)
    assert t == pytest.approx(2 * (p - 1) * alpha + 2 * (p - 1) / p * n * beta, rel=1e-12)


def test_hierarchical_allgather_inter_node_term_carries_data_over_ranks_per_node(real_engine: Engine) -> None:
    base = ["col.dp.param_message=800 MB", "col.dp.group_size=32", "col.dp.ranks_per_domain=8",
            "col.dp.n_domains=4", "link.intra.alpha=5 us", "link.inter.alpha=20 us",
            f"link.intra.beta={1 / 360} s/GB", f"link.inter.beta={1 / 45} s/GB"]
    t = real_engine.value("col.dp.t_allgather_hierarchical", assign=base, base_units=True)
    inter = 3 * 20e-6 + 3 / 4 * (800e6 / 8) / 45e9
    intra = 7 * 5e-6 + 7 / 8 * 800e6 / 360e9
    assert t == pytest.approx(inter + intra, rel=1e-9)
    # with 8 ranks per node the inter-node bytes are an eighth of a flat ring's
    wider = real_engine.value("col.dp.t_allgather_hierarchical", assign=[a for a in base if "ranks_per" not in a
                                                                   and "n_domains" not in a]
                  + ["col.dp.ranks_per_domain=1", "col.dp.n_domains=32"], base_units=True)
    assert wider > t


GPT3 = ["arch.n_layers=96", "arch.hidden=12288", "arch.ffn_hidden=49152", "arch.n_heads=96",
        "arch.n_kv_heads=96", "arch.head_dim=128", "arch.vocab=51200", "arch.ffn.n_matrices=2",
        "arch.norm.vectors_per_norm=2"]
DENSE_GQA = ["arch.params.attn_per_layer=gqa", "arch.attn.qk_head_dim=gqa", "arch.params.ffn_total=dense"]


def test_kaplan_counts_non_embedding_parameters(real_engine: Engine) -> None:
    n = real_engine.value("arch.params.non_embedding", assign=GPT3, variants=DENSE_GQA, base_units=True)
    l, h = 96, 12288
    assert n == pytest.approx(12 * l * h ** 2, rel=1e-3)  # 12 l h^2 (+ norm vectors); no embedding matrix
    assert n < 12 * l * h ** 2 + 51200 * h  # the V h embedding is not in N
    rel = real_engine.manifest["relations"]["arch.flops.step_dense.kaplan"]
    assert "non_embedding" in rel["parts"]["expression"] and "6" in rel["parts"]["expression"]
    assert "kaplan2020_scaling" in rel["references"]


def test_mla_kv_cache_is_latent_plus_rope_not_per_head_k_and_v(real_engine: Engine) -> None:
    mla = real_engine.value("arch.kv_cache.bytes_per_token_per_layer", assign=[
        "arch.mla.kv_lora_rank=512", "arch.mla.rope_head_dim=64", "arch.kv_cache.bytes_per_element=2 B"],
        variants=["arch.kv_cache.elements_per_token_per_layer=mla"], base_units=True)
    byte = 8  # base units: information is counted in bits
    assert mla / byte == pytest.approx((512 + 64) * 2)
    mha = real_engine.value("arch.kv_cache.bytes_per_token_per_layer", assign=[
        "arch.n_kv_heads=128", "arch.head_dim=128", "arch.kv_cache.bytes_per_element=2 B"],
        variants=["arch.kv_cache.elements_per_token_per_layer=gqa"], base_units=True)
    assert mha / byte == pytest.approx(2 * 128 * 128 * 2)


def test_mfu_uses_model_flops_and_hfu_adds_recomputation(real_engine: Engine) -> None:
    mfu = real_engine.manifest["variables"].get("training.mfu")
    hfu = real_engine.manifest["variables"].get("training.hfu")
    assert mfu and hfu, "training.mfu and training.hfu are distinct quantities"
    full = ["training.recompute_overhead=1.3333333333333333", "gpu.peak_flops=1e15 FLOP/s"]
    m = real_engine.value("training.mfu", [FIXTURE], full, base_units=True)
    h = real_engine.value("training.hfu", [FIXTURE], full, base_units=True)
    assert h / m == pytest.approx(4 / 3, rel=1e-9)


@pytest.mark.parametrize(("ratio", "status"), [(2, "satisfied"), (1, "violated")])
def test_hfu_is_bounded_by_the_linear_format_peak_not_the_training_format_peak(
        real_engine: Engine, ratio: int, status: str) -> None:
    # 1.5 times the BF16 peak is within reach of FP8 GEMMs (twice the rate), beyond the hardware in BF16
    res = real_engine.resolve("training.hfu", assign=[
        "training.achieved_flops_hardware=1500 TFLOP/s", "gpu.peak_flops=1000 TFLOP/s",
        f"precision.linear.rate_ratio={ratio}", "training.mfu=1.4"])
    assert res.value == pytest.approx(1.5, rel=1e-12)
    assert next(c for c in res.checks if c.name == "training.hfu.at_most_linear_peak").status == status
    assert not [c for c in res.checks if c.name == "training.hfu" and c.status == "violated"]


def test_power_cost_uses_site_power(real_engine: Engine) -> None:
    base = real_engine.value("econ.run.power_cost", [FIXTURE], base_units=True)
    hotter = real_engine.value("econ.run.power_cost", [FIXTURE], ["thermal.facility.cooling_power=1600 W"],
                               base_units=True)
    assert hotter / base == pytest.approx(6200 / 5200, rel=1e-12)  # IT power unchanged, PUE up


def test_facility_capex_amortizes_over_its_own_life(real_engine: Engine) -> None:
    common = ["econ.finance.wacc=0.08"]
    it5 = real_engine.value("econ.it.capex_rate", assign=common + ["econ.capex.it=100 MUSD", "econ.it.life=5 year",
                                                              "econ.it.residual_fraction=0"], base_units=True)
    fac15 = real_engine.value("econ.facility.capex_rate", assign=common + ["econ.capex.facility=100 MUSD",
                                                                     "econ.facility.life=15 year"], base_units=True)
    crf = lambda r, n: r / (1 - (1 + r) ** -n)  # noqa: E731  capital recovery factor
    year = 31557600.0
    assert it5 == pytest.approx(100e6 * crf(0.08, 5) / year, rel=1e-6)
    assert fac15 == pytest.approx(100e6 * crf(0.08, 15) / year, rel=1e-6)
    fac5 = real_engine.value("econ.facility.capex_rate", assign=common + ["econ.capex.facility=100 MUSD",
                                                                    "econ.facility.life=5 year"], base_units=True)
    assert fac5 == pytest.approx(it5, rel=1e-9) and fac15 < fac5


RELIABILITY = [
    "cluster.node.n_gpus=8", "cluster.rack.n_nodes=4", "cluster.site.n_racks=512", "cluster.node.n_nic_ports=8",
    "cluster.fabric.switch_radix=64", "cluster.fabric.oversubscription=1", "cluster.fabric.n_tiers=3",
    "cluster.fabric.optical_fraction=1", f"cluster.rel.gpu_failure_rate={419 * 0.587 / (16384 * 54 * 24)} 1/hour",
    "cluster.rel.node_failure_rate=2e-5 1/hour", "cluster.rel.link_failure_rate=1e-6 1/hour",
    "cluster.rel.switch_failure_rate=1e-5 1/hour", "cluster.rel.job_software_failure_rate=0.01 1/hour",
    "cluster.storage.n_servers=100", "cluster.storage.server_write_bw=10 GB/s", "cluster.storage.server_read_bw=20 GB/s",
    "cluster.node.frontend_bw=50 GB/s", "arch.params.total=405e9", "precision.bytes_per_param=2 B",
    "precision.bytes_per_master_param=4 B", "precision.optimizer.states_per_param=2",
    "precision.bytes_per_optimizer_state=4 B", "cluster.rel.t_detect=5 minute", "cluster.rel.t_reinit=10 minute",
    "cluster.rel.planned_downtime_fraction=0"]


def test_availability_falls_with_cluster_size(real_engine: Engine) -> None:
    variants = ["cluster.ckpt.t_blocking=sync", "cluster.ckpt.interval=daly", "opt.state.n_moments=adamw",
                "cluster.rel.job_failure_rate=components"]
    avail = []
    for n in (1024, 4096, 16384):
        res = real_engine.resolve("cluster.rel.availability", assign=RELIABILITY + [f"par.n_gpus={n}"],
                                  variants=variants)
        if res.missing:
            pytest.fail(f"availability needs {sorted(res.missing)}")
        avail.append(res.value)
    assert 1 > avail[0] > avail[1] > avail[2] > 0
    assert avail[2] < 0.95 < avail[0]


@pytest.mark.parametrize(("variant", "rotated"), [("gqa", 8192 + 1024), ("mla", (64 + 1) * 64)])
def test_rotary_embedding_streams_the_rotated_query_and_key_elements(real_engine: Engine, variant: str,
                                                                       rotated: int) -> None:
    # Per token and layer the rotation reads and writes the query and key elements it rotates forward, and their
    # gradients backward (4 values each, 2 bytes), split over the tensor-parallel heads; MLA rotates only its
    # decoupled 64-wide part of each of 64 query heads and of the one shared key, learned positions none.
    shape = ["arch.hidden=8192", "arch.q_dim=8192", "arch.kv_dim=1024", "arch.n_heads=64",
             "arch.mla.rope_head_dim=64", "arch.ffn.active_width=28672", "arch.ffn.n_matrices=3", "par.tp=4",
             "par.act.replicated_divisor=4", "par.recompute.forward_passes=1", "precision.bytes_per_activation=2 B"]

    def traffic(learned: int) -> float:
        return real_engine.value("kernel.elementwise.bytes_per_token_per_layer",
                                 assign=[*shape, f"arch.pos_emb_learned={learned}"],
                                 variants=[f"arch.attn.rope_elements_per_token_per_layer={variant}"])

    # norms, residual adds and SwiGLU: 2 B x ((10 + 12) h / 4 + (3 + 6 - 1) d_ff / 4)
    rest = 2 * (22 * 8192 / 4 + 8 * 28672 / 4)
    rope = 2 * 4 * rotated / 4
    assert traffic(0) == pytest.approx(rest + rope, rel=1e-12)
    assert traffic(1) == pytest.approx(rest + (rope if variant == "mla" else 0), rel=1e-12)
