"""Issue 5's values that must come out right: physics and hardware chains through the real resolver."""

from __future__ import annotations

import math

import pytest
from helpers import REPO, Engine


@pytest.mark.parametrize("preset,datasheet", [("gpu_h100_sxm", 989.4e12), ("gpu_a100_sxm", 312e12),
                                              ("gpu_h800_sxm", 989.4e12), ("gpu_h200_sxm", 989.4e12)])
def test_bf16_dense_peak_derived_from_sms_rate_and_clock(real_engine: Engine, preset: str, datasheet: float) -> None:
    res = real_engine.resolve("gpu.peak_flops", [preset], variants=["gpu.peak_flops=derived"])
    assert res.missing == {}
    assert abs(res.value - datasheet) / datasheet < 0.01
    used = {s.relation for s in res.trace if s.relation}
    assert "gpu.peak_flops.derived" in used  # SM count x per-SM tensor rate x clock, not the datasheet figure
    steps = {s.variable for s in res.trace}
    assert {"gpu.sm_count", "gpu.clock.boost", "arith.sm.dense_flops_per_clk"} <= steps


def test_training_peak_is_the_dense_tensor_core_rate_not_fp32(real_engine: Engine) -> None:
    h100 = real_engine.value("gpu.peak_flops", ["gpu_h100_sxm"])
    assert h100 == pytest.approx(989.4e12, rel=0.01)
    assert h100 > 10 * 66.9e12  # the FP32 rate (calibration/hardware.yaml) is an order of magnitude lower


def test_hbm3_bandwidth_from_stacks_bus_and_data_rate(real_engine: Engine) -> None:
    res = real_engine.resolve("mem.hbm.bandwidth", ["gpu_h100_sxm"], variants=["mem.hbm.bandwidth=derived"])
    assert res.missing == {} and abs(res.value - 3.35e12) / 3.35e12 < 0.02
    assert "mem.hbm.bandwidth.derived" in {s.relation for s in res.trace}


# Vendor figures per GPU preset, typed in from the datasheets independently of the catalog: dense BF16 peak
# (FLOP/s), HBM bandwidth (B/s) and HBM capacity (B). A GPU preset added without a row here fails below.
GPU_DATASHEETS = {
    "gpu_a100_sxm": (312e12, 2.039e12, 80 * 2**30),
    "gpu_h100_sxm": (989.4e12, 3.35e12, 80 * 2**30),
    "gpu_h800_sxm": (989.4e12, 3.35e12, 80 * 2**30),
    "gpu_h200_sxm": (989.4e12, 4.8e12, 141e9),
    "gpu_b200": (2250e12, 8e12, 180e9),
    "gpu_mi300x": (1307.4e12, 5.3e12, 192 * 2**30),
}


def test_every_gpu_preset_is_listed_and_sourced(real_engine: Engine) -> None:
    presets = real_engine.manifest["presets"]
    assert {n for n in presets if n.startswith("gpu_")} == set(GPU_DATASHEETS)
    assert all(presets[n]["provenance"] == "sourced" for n in GPU_DATASHEETS)


@pytest.mark.parametrize("preset", sorted(GPU_DATASHEETS))
def test_gpu_preset_peak_bandwidth_and_capacity_match_the_datasheet(real_engine: Engine, preset: str) -> None:
    peak, bandwidth, capacity = GPU_DATASHEETS[preset]
    assert real_engine.value("gpu.peak_flops", [preset]) == pytest.approx(peak, rel=0.01)
    assert real_engine.value("mem.hbm.bandwidth", [preset]) == pytest.approx(bandwidth, rel=0.02)
    assert real_engine.value("mem.hbm.capacity", [preset]) == pytest.approx(capacity, rel=0.01)


def test_hopper_l2_bandwidth_resolves_from_the_preset_and_exceeds_hbm(real_engine: Engine) -> None:
    # Issue 15: no H100-class run may need an unsourced L2 assignment. 5120 B/clk at the 1.83 GHz boost clock.
    for preset in ("gpu_h100_sxm", "gpu_h800_sxm", "gpu_h200_sxm"):
        l2 = real_engine.value("mem.l2.bandwidth", [preset], variants=["mem.l2.bytes_per_clk=datasheet"])
        assert l2 == pytest.approx(5120 * 1.83e9, rel=1e-6)
        assert l2 > real_engine.value("mem.hbm.bandwidth", [preset])



@pytest.mark.parametrize("gpu,pair", [("gpu_a100_sxm", 1), ("gpu_mi300x", 1), ("gpu_h100_sxm", 2),
                                      ("gpu_h800_sxm", 2), ("gpu_h200_sxm", 2), ("gpu_b200", 2)])
def test_gemm_l2_intensity_counts_the_thread_blocks_one_multicast_a_tile_feeds(real_engine: Engine, gpu: str,
                                                                               pair: int) -> None:
    # 256 x 128 BF16 tiles: per K step 256 rows of A and 128 pair columns of B, 2 x 256 x 128 pair FLOPs. GPUs
    # without thread-block clusters read A once per thread block (85.3 FLOP/B); Hopper and later once per pair.
    presets = [gpu, "precision_bf16_mixed", "megatron_lm_software"]
    assert real_engine.value("kernel.gemm.cluster_ctas", presets) == pair
    expected = 2 * 256 * 128 * pair / ((256 + 128 * pair) * 2)
    assert real_engine.value("kernel.gemm.intensity_l2", presets) == pytest.approx(expected, rel=1e-12)
    assert real_engine.value("kernel.linear.intensity_l2", presets) == pytest.approx(expected, rel=1e-12)
    # a library asking for more thread blocks than a cluster holds gets the portable cluster of 8
    wide = real_engine.value("kernel.gemm.cluster_ctas", presets, assign=["kernel.gemm.multicast_ctas=16"])
    assert wide == (8 if pair > 1 else 1)

def test_h800_node_has_less_than_half_the_h100_nvlink_and_nvl72_one_72_gpu_domain(real_engine: Engine) -> None:
    h100 = real_engine.value("link.nvlink.bw_per_direction", ["dgx_h100_node"])
    h800 = real_engine.value("link.nvlink.bw_per_direction", ["hgx_h800_node"])
    assert (h100, h800) == (pytest.approx(450), pytest.approx(200))  # GB/s per direction
    assert real_engine.value("cluster.scaleup.domain_size", ["gb200_nvl72_rack"]) == 72
    assert real_engine.value("cluster.scaleup.domain_size", ["hgx_b200_node"]) == 8
    # The rack's GPUs are the 1,200 W GB200 variant: applied after gpu_b200 it replaces the HGX figures.
    assert real_engine.value("gpu.peak_flops", ["gpu_b200", "gb200_nvl72_rack"]) == pytest.approx(2.5e15)
    assert real_engine.value("mem.hbm.capacity", ["gpu_b200", "gb200_nvl72_rack"]) == \
        pytest.approx(186e9)


README_RUN = "runs/llama70b_1024xh100.yaml"
SITE = "cluster_dgx_superpod_h100_4su, pcie_gen5_x16_protocol_efficiency, storage_netapp_beegfs_ef600"


def run_step(engine: Engine, hardware: str):
    run = engine.load_run(REPO / README_RUN, [f"hardware=[{hardware}, infiniband_ndr_fat_tree, {SITE}]"])
    return engine.resolver.resolve("training.t_step", engine.run_scenario(run))


def test_readme_run_on_h800_resolves_and_its_tp_all_reduce_is_slower_than_on_h100(real_engine: Engine) -> None:
    h100 = run_step(real_engine, "gpu_h100_sxm, dgx_h100_node")
    h800 = run_step(real_engine, "gpu_h800_sxm, hgx_h800_node")
    assert h100.missing == {} and h800.missing == {}
    assert h800.value > h100.value  # same chip, 400 instead of 900 GB/s NVLink under tp = 8


def test_mi300x_platform_sends_on_seven_direct_links_and_its_l2_outruns_hbm(real_engine: Engine) -> None:
    # seven xGMI links of 64 GB/s each way to the seven peers, no switch; 8 XCDs x 2 KB/clk at 2.1 GHz
    assert real_engine.value("link.scaleup.bw_per_gpu", ["mi300x_platform_node"]) == pytest.approx(7 * 64)
    assert real_engine.value("link.intra.n_switch_hops", ["mi300x_platform_node"]) == 0
    assert real_engine.value("cluster.scaleup.domain_size", ["mi300x_platform_node"]) == 8
    l2 = real_engine.value("mem.l2.bandwidth", ["gpu_mi300x"], variants=["mem.l2.bytes_per_clk=datasheet"])
    assert l2 == pytest.approx(16384 * 2.1e9, rel=1e-9) and l2 > real_engine.value("mem.hbm.bandwidth", ["gpu_mi300x"])


@pytest.mark.parametrize("hardware,unsourced", [
    ("gpu_b200, hgx_b200_node", set()),
    ("gpu_b200, gb200_nvl72_rack", {"cluster.node.n_nic_ports"}),
    # the platform's NICs belong to the server built around it, which no source at hand describes
    ("gpu_mi300x, mi300x_platform_node", {"cluster.node.n_nic_ports"})])
def test_runs_on_new_hardware_name_exactly_the_figures_the_sources_do_not_give(real_engine: Engine, hardware: str,
                                                                          unsourced: set) -> None:
    res = run_step(real_engine, hardware)
    assert set(res.missing) == unsourced
    supplied = {"cluster.node.n_nic_ports": "4"}
    run = real_engine.load_run(REPO / README_RUN, [f"hardware=[{hardware}, infiniband_ndr_fat_tree, {SITE}]"])
    run = run.with_extras([], {k: v for k, v in supplied.items() if k in unsourced}, {}, [])
    assert real_engine.resolver.resolve("training.t_step", real_engine.run_scenario(run)).missing == {}


@pytest.mark.parametrize("gpu,peak", [("gpu_b200", 2.25e15), ("gpu_b200, gb200_nvl72_rack", 2.5e15)])
def test_blackwell_clock_is_its_peak_over_its_tensor_rate_and_its_l2_the_measured_cross_partition_rate(
        real_engine: Engine, gpu: str, peak: float) -> None:
    # Chips and Cheese: 1024 16-bit MACs per cycle per partition, four partitions per SM, 148 SMs
    flop_per_clock = 148 * 4 * 1024 * 2
    clock_ghz = real_engine.value("gpu.clock.boost", gpu.split(", "))
    assert clock_ghz * 1e9 == pytest.approx(peak / flop_per_clock, rel=5e-4)
    assert real_engine.value("gpu.peak_flops", gpu.split(", ")) == pytest.approx(peak)
    if gpu == "gpu_b200":  # 16.8 TB/s once a footprint spans both L2 partitions, at the tensor clock
        l2 = real_engine.value("mem.l2.bandwidth", ["gpu_b200"], variants=["mem.l2.bytes_per_clk=datasheet"])
        assert l2 == pytest.approx(16.8e12, rel=5e-4)


def test_euv_source_wavelength(real_engine: Engine) -> None:
    nm = real_engine.value("physical.litho.euv.wavelength", assign=["physical.litho.euv.photon_energy=91.8 eV"],
               variants=["physical.litho.euv.wavelength=tin_plasma_line"])
    assert nm == pytest.approx(13.5, abs=0.01)


ARF = ["physical.litho.wavelength=arf_immersion", "physical.litho.numerical_aperture=arf_immersion",
       "physical.litho.arf.wavelength=datasheet", "physical.litho.arf.numerical_aperture=derived"]


@pytest.mark.parametrize("k1,status", [(0.25, "satisfied"), (0.30, "satisfied"), (0.2, "violated")])
def test_arf_immersion_resolution_and_k1_limit(real_engine: Engine, k1: float, status: str) -> None:
    res = real_engine.resolve("physical.litho.resolution", assign=[
        "physical.litho.arf.wavelength_rated=193 nm", "physical.litho.water_refractive_index=1.44",
        "physical.litho.arf.sin_half_angle=0.9375", f"physical.litho.k1={k1}"], variants=ARF)
    na = 1.44 * 0.9375  # NA = n sin(theta) with water as the immersion medium
    assert res.value == pytest.approx(k1 * 193 / na, rel=1e-9)
    k1_check = next(c for c in res.checks if c.name == "physical.litho.k1.single_exposure_limit")
    assert k1_check.status == status


@pytest.mark.parametrize("swing_mv,status", [(59.0, "violated"), (60.0, "satisfied"), (85.0, "satisfied")])
def test_subthreshold_swing_cannot_beat_the_thermionic_limit(real_engine: Engine, swing_mv: float, status: str) -> None:
    res = real_engine.resolve("physical.mosfet.subthreshold_swing", assign=[
        f"physical.mosfet.subthreshold_swing_measured={swing_mv} mV", "physical.device.temperature=300 K"],
        variants=["physical.mosfet.subthreshold_swing=measured"])
    check = next(c for c in res.checks if c.name == "physical.mosfet.subthreshold_swing.boltzmann_limit")
    assert check.status == status
    floor_mv = 1.380649e-23 * 300 / 1.602176634e-19 * math.log(10) * 1e3
    assert floor_mv == pytest.approx(59.5, abs=0.05)
    assert (swing_mv >= floor_mv) == (status == "satisfied")


def test_dies_per_wafer_standard_formula(real_engine: Engine) -> None:
    n = real_engine.value("physical.manufacturing.dies_per_wafer", assign=[
        "physical.manufacturing.wafer_diameter=300 mm", "gpu.die_area=814 mm**2",
        "physical.manufacturing.edge_exclusion=0 mm", "physical.manufacturing.scribe_width=0 um"])
    d, area = 300.0, 814.0
    assert n == math.floor(math.pi * (d / 2) ** 2 / area - math.pi * d / math.sqrt(2 * area)) == 63


def test_every_system_feeds_a_headline_and_all_relations_are_checked(real_engine: Engine) -> None:
    stats = real_engine.manifest["stats"]
    assert stats["coverage"]["dimension_checks"] == 1.0 and stats["cycles"] == 0
    for system in ("physical", "memory_cell", "memory_subsystem", "precision", "arithmetic", "gpu", "thermal"):
        assert stats["by_system"][system]["feeds_headline"], system


@pytest.mark.parametrize("node,efficiency", [("dgx_h100_node", "link.nvls.efficiency"),
                                             ("dgx_a100_node", "link.intra.efficiency"),
                                             ("hgx_h800_node", "link.intra.efficiency")])
def test_tensor_parallel_all_reduce_runs_at_its_algorithms_efficiency(real_engine: Engine, node: str,
                                                                      efficiency: str) -> None:
    # NVLink SHARP's in-switch reduction paces an H100 node's all-reduce (about 480 GB/s of bus bandwidth on 8
    # GPUs against 370 GB/s for ring copies, nccl-tests issue 212); ring nodes run at the copy efficiency, and the
    # other efficiency plays no part in either.
    assign = ["par.tp=8", "col.tp.message=1 GB", "link.intra.sw_latency=0 s", "link.nvls.sw_latency=0 s",
              "link.intra.switch_latency=0 s", "link.intra.efficiency=0.8", "link.nvls.efficiency=0.5"]
    res = real_engine.resolve("col.tp.t_allreduce", [node], assign=assign)
    assert res.missing == {}
    used = {s.variable for s in res.trace}
    other = ({"link.intra.efficiency", "link.nvls.efficiency"} - {efficiency}).pop()
    assert efficiency in used and other not in used
    # and its own per-message latency: an in-switch message's, or a ring step's
    latency = "link.nvls.sw_latency" if efficiency == "link.nvls.efficiency" else "link.intra.sw_latency"
    assert latency in used and ({"link.intra.sw_latency", "link.nvls.sw_latency"} - {latency}).pop() not in used
    bw = real_engine.value("link.scaleup.bw_per_gpu", [node]) * 1e9  # GB/s
    volume = 1 if efficiency == "link.nvls.efficiency" else 2 * 7 / 8
    rate = 0.5 if efficiency == "link.nvls.efficiency" else 0.8
    assert real_engine.value("col.tp.t_allreduce", [node], assign=assign, base_units=True) == pytest.approx(
        volume * 1e9 / (bw * rate), rel=1e-9)


def test_sequence_parallel_gathers_and_scatters_at_the_copy_rate_even_where_the_switch_reduces(
        real_engine: Engine) -> None:
    # Under sequence parallelism the layer's reduction is a reduce-scatter and an all-gather, which an H100 node's
    # NVLink SHARP does not speed up (its NVLS reduce-scatter reaches 363 GB/s of bus bandwidth, its ring all-reduce
    # 368, its NVLS all-reduce 479): t - 1 copy steps of 1/t of the message each, twice.
    assign = ["par.tp=8", "col.tp.message=1 GB", "link.intra.sw_latency=2 us", "link.nvls.sw_latency=20 us",
              "link.intra.switch_latency=0 s", "link.intra.efficiency=0.8", "link.nvls.efficiency=0.5"]
    bw = real_engine.value("link.scaleup.bw_per_gpu", ["dgx_h100_node"]) * 1e9  # GB/s

    def collective(sp: int) -> float:
        return real_engine.value("col.tp.t_collective", ["dgx_h100_node"], assign=[*assign, f"par.sp={sp}"],
                                 base_units=True)

    assert collective(1) == pytest.approx(2 * 7 * 2e-6 + 2 * 7 / 8 * 1e9 / (bw * 0.8), rel=1e-9)
    assert collective(0) == pytest.approx(2 * 20e-6 + 1e9 / (bw * 0.5), rel=1e-9)
