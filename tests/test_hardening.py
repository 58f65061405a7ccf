"""Regression tests for every failure class the fuzzing campaigns of issues 17 and 41 found: tracebacks in
`check` and in commands, missing resource limits, silently wrong results, half-written output folders and
misleading pages. Each case is the one the campaign reported; each failed before its fix."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from helpers import REPO, check, mini_catalog, write_system

RUN = REPO / "runs" / "llama70b_1024xh100.yaml"
CSV_HEADER = ("model,hardware,precision,hidden,ffn_hidden,heads,layers,seq_len,vocab,gpus,tp,pp,dp,global_batch,"
              "micro_batch,pipeline_interleaving,recompute,sequence_parallel,seconds_per_iteration\n")
CSV_ROW = "megatron-22B,nvidia_a100_sxm4_80gb,fp16,6144,24576,64,48,2048,51200,8,8,1,1,4,4,1,full,false,1.42\n"
VARIABLE = """variables:
  - name: econ.x
    units: {units}
    description: x
    references: [narayanan2021_megatron]
    root: {{category: scenario_boundary, family: f}}
"""


def errors_of(root: Path) -> list[tuple[str, int, str, str]]:
    return [(f.file, f.line, f.id, f.message) for f in check(root).errors]


# ---- check: every file problem is a finding with file:line -----------------------------------------

def test_a_tag_whose_constructor_fails_is_a_finding(tmp_path) -> None:
    # `!!timestamp nope` raised AttributeError inside PyYAML's safe constructor
    root = mini_catalog(tmp_path)
    write_system(root, "economics", "variables:\n  - name: econ.x\n    units: s\n    description: !!timestamp nope\n")
    [(file, line, fid, message)] = errors_of(root)
    assert (file, line, fid) == ("catalog/economics/extra.yaml", 5, "yaml.syntax") and "timestamp" in message


@pytest.mark.parametrize("units", ["m**1e400", "m**-1e400", "m**13"])
def test_an_infinite_or_huge_unit_exponent_is_a_finding(tmp_path, units) -> None:
    # `m**1e400` raised ValueError: Invalid literal for Fraction: 'inf' in units.py
    root = mini_catalog(tmp_path)
    write_system(root, "economics", VARIABLE.format(units=units))
    [(file, line, fid, message)] = errors_of(root)
    assert (file, line, fid) == ("catalog/economics/extra.yaml", 4, "unit.invalid") and "exponent" in message


def test_an_infinite_exponent_inside_unit_in_an_expression_is_a_finding(tmp_path) -> None:
    root = mini_catalog(tmp_path)
    write_system(root, "economics", VARIABLE.format(units="s") + """  - name: econ.y
    units: s
    description: y
    references: [narayanan2021_megatron]
relations:
  - name: econ.y.product
    kind: identity
    defines: econ.y
    expression: econ.x * unit('m**1e400')
    description: x
    references: [narayanan2021_megatron]
""")
    [(file, line, fid, message)] = errors_of(root)
    assert (file, line, fid) == ("catalog/economics/extra.yaml", 13, "unit.invalid") and "exponent" in message


@pytest.mark.parametrize("make, reason", [
    (lambda p: os.mkfifo(p), "not a regular file"),
    (lambda p: p.symlink_to(p.name), "symbolic links"),
    (lambda p: p.mkdir(), "a directory"),
    (lambda p: p.symlink_to("gone.yaml"), "dangling"),
    (lambda p: p.write_bytes(b"# " + b"x" * (3 << 20)), "over the limit"),
    (lambda p: p.write_bytes(b"variables: []\n\xff\n"), "not UTF-8"),
])
def test_a_catalog_entry_that_cannot_be_read_is_a_finding(tmp_path, make, reason) -> None:
    # a FIFO, a symlink loop and a directory named x.yaml were skipped in silence (exit 0)
    root = mini_catalog(tmp_path)
    make(root / "economics" / "x.yaml")
    start = time.monotonic()
    [(file, line, fid, message)] = errors_of(root)
    assert (file, fid) == ("catalog/economics/x.yaml", "file.unreadable") and reason in message and line >= 1
    assert time.monotonic() - start < 30  # a FIFO is never opened (it would block)


def test_nesting_deep_enough_to_crash_libyaml_is_a_finding(tmp_path) -> None:
    # a flow list nested 30,000 deep crashed the interpreter (segmentation fault) in libyaml's composer
    root = mini_catalog(tmp_path)
    write_system(root, "economics", "nested: " + "[" * 30000 + "]" * 30000 + "\n")
    [(file, line, fid, message)] = errors_of(root)
    assert (file, line, fid) == ("catalog/economics/extra.yaml", 2, "yaml.syntax") and "nesting" in message


# ---- commands: one-line errors, exit 2 -------------------------------------------------------------

@pytest.fixture
def cli(gpustack_cli, real_build):
    def run(*args: str):
        res = gpustack_cli("--build-dir", str(real_build), *args)
        assert "Traceback" not in res.stderr
        return res
    return run


def one_line_error(res, code: int, *words: str) -> None:
    assert res.returncode == code, res.stdout + res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and all(w in lines[0] for w in words), res.stderr


@pytest.mark.parametrize("value", ["1e400 W", "9" * 400 + " W", "-1e400 W"])
def test_a_value_that_overflows_a_float_is_an_input_error(cli, value) -> None:
    # OverflowError in the resolver's domain check
    one_line_error(cli("resolve", "gpu.power.total", "--assign", f"gpu.power.total={value}"), 2,
                   "gpu.power.total", "not a finite number")


@pytest.mark.parametrize("field, value, words", [
    ("tokens", "1e400 token", ("training.total_tokens", "not a finite number")),
    ("model.hidden", "9" * 400, ("model.hidden", "less than or equal")),
])
def test_run_file_values_that_overflow_are_input_errors(cli, field, value, words) -> None:
    one_line_error(cli("estimate", str(RUN), "--samples", "10", "--set", f"{field}={value}"), 2, *words)


def test_full_width_digits_are_refused(cli) -> None:
    # `５ W` was read as 5 W
    one_line_error(cli("resolve", "gpu.power.total", "--assign", "gpu.power.total=５ W"), 2, "cannot read")


def test_a_csv_with_a_non_utf8_byte_names_its_line(cli, tmp_path) -> None:
    # UnicodeDecodeError in `validate`
    path = tmp_path / "rows.csv"
    path.write_bytes((CSV_HEADER + CSV_ROW).encode() + b"a\xffb\n")
    one_line_error(cli("validate", str(path)), 2, f"{path}:3", "not UTF-8")


def test_a_csv_with_a_byte_order_mark_is_read(cli, tmp_path) -> None:
    # the BOM became part of the first column's name: "missing column(s) model"
    path = tmp_path / "rows.csv"
    path.write_bytes(b"\xef\xbb\xbf" + (CSV_HEADER + CSV_ROW).encode())
    res = cli("validate", str(path), "--samples", "10")
    assert res.returncode == 0 and "rows:1" in res.stdout, res.stderr


# ---- resource limits: refused with the size named --------------------------------------------------

def test_samples_over_the_limit_are_refused_with_the_size(cli) -> None:
    # `resolve --samples 1000000000` grew to 22.8 GB and was killed
    start = time.monotonic()
    res = cli("resolve", "econ.cost.per_token", "--preset", "dense_training_cost_fixture", "--sample",
              "gpu.power.total~normal(700, 10)", "--samples", "1000000000")
    one_line_error(res, 2, "--samples", "1,000,000,000", "limit")
    assert time.monotonic() - start < 30


def test_a_grid_over_the_limit_is_refused_with_the_size(cli) -> None:
    # The grid streams (memory bounded by the chunk): only its time is limited.
    values = ",".join(str(v) for v in range(1, 401))
    res = cli("sweep", str(RUN), *(a for axis in ("tp", "pp", "cp", "micro_batch") for a in ("--grid", f"{axis}={values}")))
    one_line_error(res, 2, "--grid", "400 x 400 x 400 x 400", "25,600,000,000", "limit")


def test_a_plot_of_more_layouts_than_can_be_kept_is_refused(cli, tmp_path) -> None:
    # --plot keeps every valid layout as a row: 2,220,120 layouts of 16,384 GPUs generated from the grid
    axes = [a for axis in ("tp", "pp", "cp", "micro_batch", "interleave", "zero_stage", "recompute",
                           "sequence_parallel") for a in ("--grid", f"{axis}=all")]
    res = cli("sweep", str(RUN), "--set", "gpus=16384", "--set", "layout.dp=512", "--set", "layout.global_batch=1048576",
              *axes, "--plot", str(tmp_path / "p.png"))
    one_line_error(res, 2, "layouts kept", "2,220,120", "limit")
    assert not (tmp_path / "p.png").exists()


def test_input_files_over_the_limit_are_refused_with_the_size(cli, tmp_path) -> None:
    from gpustack_compiler.base.limits import MAX_CSV_BYTES, MAX_DOCUMENT_BYTES

    run_file = tmp_path / "run.yaml"
    run_file.write_bytes(RUN.read_bytes() + b"#" * MAX_DOCUMENT_BYTES)
    one_line_error(cli("estimate", str(run_file)), 2, str(run_file), "bytes, over the limit")
    csv = tmp_path / "rows.csv"
    csv.write_text(CSV_HEADER + CSV_ROW * (MAX_CSV_BYTES // len(CSV_ROW) + 1))
    one_line_error(cli("validate", str(csv)), 2, str(csv), "bytes, over the limit")
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    one_line_error(cli("estimate", str(fifo)), 2, str(fifo), "not a regular file")


# ---- silently wrong results: errors naming the field -----------------------------------------------

@pytest.mark.parametrize("args, words", [
    (("--set", "tokens=-2e12 token"), ("training.total_tokens", "positive")),
    (("--assign", "link.inter.cable_length=-100 m"), ("link.inter.cable_length", "nonnegative")),
    (("--assign", "cluster.storage.fill_fraction=7"), ("cluster.storage.fill_fraction", "outside [0.0, 1.0]")),
    (("--assign", "cluster.storage.fill_fraction=-5"), ("cluster.storage.fill_fraction", "-5")),
])
def test_an_assigned_value_outside_its_catalog_bounds_is_exit_1(cli, args, words) -> None:
    one_line_error(cli("estimate", str(RUN), "--samples", "10", *args), 1, *words, "--allow-violations")


def test_allow_violations_computes_and_lists_them(cli) -> None:
    res = cli("resolve", "gpu.power.total", "--assign", "gpu.power.total=-1 W", "--allow-violations")
    assert res.returncode == 0 and "violated     assumption gpu.power.total: positive" in res.stdout


@pytest.mark.parametrize("field, value, words", [
    ("layout.micro_batch", "1024", ("layout.global_batch", "below micro_batch 1024")),
    ("layout.global_batch", "500", ("layout.global_batch", "not divisible by dp x micro_batch = 32 x 1")),
])
def test_batches_that_do_not_divide_are_input_errors(cli, field, value, words) -> None:
    one_line_error(cli("estimate", str(RUN), "--samples", "10", "--set", f"{field}={value}"), 2,
                   f"{RUN}:11", *words)


@pytest.mark.parametrize("grid, words", [
    ("sequence_parallel=maybe", ("sequence_parallel", "maybe")),
    ("tp=-1,0", ("--grid tp", "'-1'", "greater than or equal to 1")),
    ("tp=1.5", ("--grid tp", "valid integer")),
    ("dp=0", ("--grid dp", "greater than or equal to 1")),
])
def test_grid_values_the_run_file_could_not_hold_are_input_errors(cli, grid, words) -> None:
    # `tp=-1,0` exited 0 with numpy warnings
    one_line_error(cli("sweep", str(RUN), "--grid", grid), 2, *words)


def test_a_csv_row_with_too_few_or_too_many_cells_names_its_row(cli, tmp_path) -> None:
    # found by benchmarks/fuzz.py: a truncated row gave its missing cells as None (AttributeError)
    path = tmp_path / "rows.csv"
    path.write_text(CSV_HEADER + "megat\n")
    one_line_error(cli("validate", str(path)), 2, f"{path}:2 (row 1)", "1 cells, the header has 19")
    path.write_text(CSV_HEADER + CSV_ROW.strip() + ",1,2\n")
    one_line_error(cli("validate", str(path)), 2, f"{path}:2 (row 1)", "21 cells, the header has 19")


@pytest.mark.parametrize("days, words", [("1e400", ("inf", "limit")), ("4000", ("4,000", "limit of 3,650"))])
def test_a_simulated_horizon_over_the_limit_is_refused(cli, days, words) -> None:
    # `--days 1e400` raised OverflowError; a long horizon grows the event log without bound
    one_line_error(cli("simulate", str(RUN), "--days", days), 2, "days of wallclock", *words)


def test_a_search_refuses_workers_before_starting_them(cli) -> None:
    # --trials runs in the command's process: a cluster would be started for nothing
    one_line_error(cli("sweep", str(RUN), "--grid", "tp=all", "--trials", "5", "--workers", "2"), 2,
                   "--trials searches in this process")


# ---- issue 41: every size bounded before the work starts -------------------------------------------

def nothing_written(path: Path) -> None:
    assert not path.exists() or not any(path.iterdir()), sorted(path.iterdir())


def test_a_power_resolution_over_the_bin_limit_is_refused_before_the_replay(cli, tmp_path) -> None:
    # `--power-resolution 0.001` grew to 21.4 GB and was killed by the kernel
    start = time.monotonic()
    res = cli("simulate", str(RUN), "--power-resolution", "0.001", "--out", str(tmp_path / "out"))
    one_line_error(res, 2, "--power-resolution 0.001 s", "2,066,239,034", "limit of 1,000,000")
    assert time.monotonic() - start < 30
    nothing_written(tmp_path / "out")


def test_a_power_series_over_the_bin_limit_is_refused_before_it_is_built() -> None:
    from datacenter_cases import job, replay

    from gpustack_compiler.base.errors import InputError
    from gpustack_sim.datacenter.power import power_series

    result = replay(job(rate_per_hour=0.0))
    with pytest.raises(InputError, match="over the limit of 1,000,000"):
        power_series(result.pieces, "site", 1e-3, (0, result.wallclock_ns))
    with pytest.raises(InputError, match="under a nanosecond"):
        power_series(result.pieces, "site", 1e-12, (0, result.wallclock_ns))


@pytest.mark.parametrize("command", [("simulate", str(RUN)), ("experiment", "run", "E001"),
                                     ("observatory", "build", "--out", "OUT")])
def test_replications_over_the_limit_are_refused_before_any_replay(cli, tmp_path, command) -> None:
    # memory grew about 75 MB/s with no output
    args = [str(tmp_path / "out") if a == "OUT" else a for a in command]
    start = time.monotonic()
    one_line_error(cli(*args, "--replications", "1000000000"), 2, "--replications", "100000")
    assert time.monotonic() - start < 30
    assert not (tmp_path / "out").exists()


def test_the_replication_limit_holds_for_the_api_too() -> None:
    from datacenter_cases import job

    from gpustack_compiler.base.errors import InputError
    from gpustack_sim.datacenter import simulate

    with pytest.raises(InputError, match="--replications: 1,000,000,000 is over the limit of 100,000"):
        simulate(job(), replications=10**9)


def test_an_interval_that_cannot_complete_a_checkpoint_is_refused(cli) -> None:
    # `--policy fixed --interval 1e308` never ended: every failure rolled back to step 0
    start = time.monotonic()
    res = cli("simulate", str(RUN), "--policy", "fixed", "--interval", "1e308")
    one_line_error(res, 2, "--interval", "cannot complete a checkpoint", "limit of 1,000")
    assert time.monotonic() - start < 30


def test_a_replay_that_makes_no_progress_stops_with_a_finding() -> None:
    # A policy object is not checked beforehand: the replay itself stops after the limit of failures in a row.
    from datacenter_cases import HOUR, job, replay

    from gpustack_compiler.base.errors import FindingError
    from gpustack_compiler.base.limits import MAX_FAILURES_WITHOUT_PROGRESS
    from gpustack_sim.datacenter.policies import FixedInterval

    params = job(rate_per_hour=10.0)  # a failure every 6 minutes on average, a checkpoint every 10^6 hours
    start = time.monotonic()
    with pytest.raises(FindingError, match=f"no progress: {MAX_FAILURES_WITHOUT_PROGRESS:,} failures in a row"):
        replay(params, FixedInterval(1e6 * HOUR))
    assert time.monotonic() - start < 30
    # the same job checkpointing every 2 minutes gets there
    assert replay(params, FixedInterval(120.0)).useful_steps == params.total_steps


def test_workers_over_the_limit_are_refused_before_a_process_starts(cli) -> None:
    # `sweep --workers 10000` started 10,000 processes on 2 cores ("Too many open files", 4.5 GB)
    from gpustack_compiler.base.limits import max_local_workers

    start = time.monotonic()
    res = cli("sweep", str(RUN), "--grid", "tp=1,2", "--workers", "10000")
    one_line_error(res, 2, "--workers", "10,000", f"limit of {max_local_workers()}", "--scheduler")
    assert time.monotonic() - start < 30


# ---- issue 41: no traceback --------------------------------------------------------------------------

@pytest.mark.parametrize("command", [("estimate", str(RUN)), ("simulate", str(RUN)),
                                     ("resolve", "econ.cost.per_token", "--sample",
                                      "gpu.power.total~normal(700 W, 10 W)"),
                                     ("validate", "--samples", "10"), ("observatory", "build", "--out", "OUT"),
                                     ("experiment", "run", "E001")])
def test_a_negative_seed_is_refused_by_every_command_alike(cli, tmp_path, command) -> None:
    # numpy's ValueError on every command but `experiment run`
    args = [str(tmp_path / "out") if a == "OUT" else a for a in command]
    one_line_error(cli(*args, "--seed", "-1"), 2, "--seed", "greater than or equal to 0")
    assert not (tmp_path / "out").exists()


def test_a_token_budget_that_overflows_its_figures_leaves_them_not_resolved(cli) -> None:
    # OverflowError in the integer assumption check (engine/domain.py)
    res = cli("estimate", str(RUN), "--samples", "10", "--set", "tokens=1e308 token", "--json")
    figures = {f["label"]: f for f in json.loads(res.stdout)["figures"]}
    assert figures["step time"]["value"] is not None
    assert figures["wallclock"]["value"] is None and "not finite" in figures["wallclock"]["error"]


SITES = REPO / "sites" / "example_two_sites.yaml"


@pytest.mark.parametrize("old, new, words", [
    ("bandwidth: 800 Gbit/s", "bandwidth: 0 Gbit/s", ("links[0].bandwidth", "not positive")),
    ("bandwidth: 800 Gbit/s", "bandwidth: 0", ("links[0].bandwidth", "not positive")),
    ("bandwidth: 800 Gbit/s", "bandwidth: 1e-300 Gbit/s", ("link east-west", "longer than the longest replay")),
    ("latency: 30 ms", "latency: 1e308 ms", ("links[0].latency", "beyond the longest replay (3,650 days)")),
    ("accelerator_power: 1 kW", "accelerator_power: 0 W", ("sites[0].accelerator_power", "not positive")),
])
def test_sites_values_that_divide_or_overflow_are_one_line_errors(cli, tmp_path, old, new, words) -> None:
    # ZeroDivisionError / OverflowError in datacenter/sites.py and events.py
    text = SITES.read_text()
    assert old in text
    path = tmp_path / "sites.yaml"
    path.write_text(text.replace(old, new, 1))
    one_line_error(cli("simulate", str(RUN), "--sites", str(path)), 2, str(path), *words)


# ---- issue 41: no silently wrong result with exit 0 ----------------------------------------------------

def strict_json(text: str):
    """json.loads, except that the bare NaN and Infinity json.dumps writes are refused, as by any other parser."""
    def refuse(constant):
        raise ValueError(f"not JSON: {constant}")
    return json.loads(text, parse_constant=refuse)


def test_a_figure_that_cannot_be_finite_is_not_resolved_and_the_json_stays_valid(cli) -> None:
    # planned downtime 1 (inside its bounds): availability 0, wallclock and cost `nan`, bare NaN in --json
    res = cli("estimate", str(RUN), "--samples", "10", "--assign", "cluster.rel.planned_downtime_fraction=1", "--json")
    figures = {f["label"]: f for f in strict_json(res.stdout)["figures"]}
    assert figures["availability"]["value"] == 0
    for label in ("wallclock", "total cost", "cost per token"):
        assert figures[label]["value"] is None and "not finite" in figures[label]["error"], figures[label]
    text = cli("estimate", str(RUN), "--samples", "10", "--assign", "cluster.rel.planned_downtime_fraction=1").stdout
    assert " nan " not in text and "not resolved: training.wallclock" in text


def test_json_output_writes_a_non_finite_number_as_null() -> None:
    from gpustack_sim.cli.app import json_text

    assert strict_json(json_text({"a": [float("nan"), float("inf"), 1.5], "b": (float("-inf"),)})) == \
        {"a": [None, None, 1.5], "b": [None]}


def test_a_sample_is_truncated_to_its_variables_declared_domain(cli) -> None:
    # normal(10 year, 8 year) drew negative facility lives (a negative capital-recovery factor)
    import numpy as np

    from gpustack_compiler.language.kinds.distributions import NORMAL
    from gpustack_sim.analyses.uncertainty import Distribution, Domain

    res = cli("resolve", "econ.facility.life", "--assign", "econ.facility.life=10 year", "--sample",
              "econ.facility.life~normal(10 year, 8 year)", "--samples", "20000", "--json")
    summary = strict_json(res.stdout)["uncertainty"]
    assert summary["p5"] > 0 and "truncated to (0, inf)" in summary["inputs"]["econ.facility.life"]
    positive = Domain(0.0, np.inf, low_open=True)
    assert abs(positive.mass(NORMAL, {"mean": 10.0, "sd": 8.0}) - 0.8944) < 1e-4  # Phi(10 / 8)
    draws = Distribution("x", NORMAL, {"mean": 10.0, "sd": 8.0}, positive).draw(np.random.default_rng(0), 100_000)
    assert draws.min() > 0 and abs(np.median(draws) - 11.06) < 0.1  # the truncated normal's median, not 10


def test_a_sample_mostly_outside_its_variables_domain_is_refused(cli) -> None:
    one_line_error(cli("resolve", "econ.facility.life", "--sample", "econ.facility.life~normal(-10 year, 8 year)"),
                   2, "only 0.106 of normal(-10, 8)", "declared positive (0, inf)")


def test_a_sample_replaces_a_definition_only_when_it_says_so(cli) -> None:
    # --sample on a defined variable silently replaced its definition
    one_line_error(cli("resolve", "econ.cost.per_token", "--preset", "dense_training_cost_fixture", "--sample",
                       "training.t_step~normal(4 s, 0.1 s)"), 2, "training.t_step",
                   "is computed by training.t_step.compose",
                   "instead of its definition")
    res = cli("resolve", "econ.cost.per_token", "--preset", "dense_training_cost_fixture", "--sample",
              "training.t_step~normal(4 s, 0.1 s) instead of its definition", "--samples", "100")
    assert res.returncode == 0 and "sampled training.t_step ~ normal(4, 0.1)" in res.stdout, res.stderr


@pytest.mark.parametrize("command", [("resolve", "econ.cost.per_token", "--preset", "dense_training_cost_fixture"),
                                     ("estimate", str(RUN), "--samples", "10")])
def test_a_variant_key_that_does_not_exist_is_an_error(cli, command) -> None:
    # resolve ignored it; estimate exited 0 with "not resolved"
    one_line_error(cli(*command, "--variant", "training.flops_per_step=dnse"), 2,
                   "--variant training.flops_per_step=dnse", "no variant `dnse`", "did you mean dense")


def test_validating_an_empty_folder_is_an_error(cli, tmp_path) -> None:
    # printed nothing, exit 0
    (tmp_path / "empty").mkdir()
    one_line_error(cli("validate", str(tmp_path / "empty")), 2, str(tmp_path / "empty"), "no observation files")


@pytest.mark.parametrize("make, words", [(lambda p: None, ("not found",)), (lambda p: p.mkdir(), ("no protocols",))])
def test_an_observatory_with_a_missing_or_empty_experiments_folder_is_an_error(cli, tmp_path, make, words) -> None:
    # built a site with no experiments, exit 0
    make(tmp_path / "exp")
    start = time.monotonic()
    res = cli("observatory", "build", "--out", str(tmp_path / "site"), "--experiments", str(tmp_path / "exp"),
              "--run", str(RUN), "--simulation", str(tmp_path / "none"))
    one_line_error(res, 2, str(tmp_path / "exp"), *words)
    assert time.monotonic() - start < 60 and not (tmp_path / "site").exists()


@pytest.mark.parametrize("digit", ["５", "٥"])
def test_a_csv_with_a_non_ascii_digit_is_refused(cli, tmp_path, digit) -> None:
    # full-width digits were read as ASCII ones, against the README
    path = tmp_path / "rows.csv"
    path.write_text(CSV_HEADER + CSV_ROW.replace(",8,8,1,1,4,4,", f",8,8,1,1,{digit},4,"), encoding="utf-8")
    one_line_error(cli("validate", str(path)), 2, f"{path}:2 (row 1)", "column global_batch", "non-ASCII digit")


def test_an_overloaded_serving_fleet_has_no_ttft(cli) -> None:
    # `request_rate: 1e300` reported TTFT p99 = p50 = 0.059 s (the prefill alone) with a validity warning
    res = cli("estimate", str(REPO / "runs" / "serve_llama70b_8xh100.yaml"), "--samples", "10",
              "--set", "workload.request_rate=1e300", "--json")
    figures = {f["label"]: f for f in strict_json(res.stdout)["figures"]}
    for label in ("TTFT p50", "TTFT p99"):
        assert figures[label]["value"] is None, figures[label]
        assert "defined only where serve.replica.utilization < 1" in figures[label]["error"]


# ---- issue 41: no half-written or mixed output folder ------------------------------------------------

def test_simulate_out_replaces_the_folder_whole_and_records_its_files(cli, tmp_path) -> None:
    import hashlib

    out = tmp_path / "out"
    assert cli("simulate", str(RUN), "--seed", "1", "--out", str(out)).returncode == 0
    first = json.loads((out / "result.json").read_text())
    assert set(first["files"]) == {"events.parquet", "power.parquet", "timeline.png"}
    for name, digest in first["files"].items():
        assert hashlib.sha256((out / name).read_bytes()).hexdigest() == digest
    assert cli("simulate", str(RUN), "--seed", "2", "--out", str(out)).returncode == 0
    second = json.loads((out / "result.json").read_text())
    assert second["seed"] == 2 and second["files"]["events.parquet"] != first["files"]["events.parquet"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no temporary folder left beside it


def test_simulate_out_refuses_a_folder_of_other_files_before_the_replay(cli, tmp_path) -> None:
    (tmp_path / "mine.txt").write_text("keep me")
    one_line_error(cli("simulate", str(RUN), "--out", str(tmp_path)), 2, str(tmp_path), "not a simulation's")
    assert [p.name for p in tmp_path.iterdir()] == ["mine.txt"]


def test_a_simulation_folder_mixing_two_runs_is_refused_by_its_readers(cli, tmp_path) -> None:
    # a killed `simulate --out` left new events beside the old result.json; the observatory accepted the mix
    a, b = tmp_path / "a", tmp_path / "b"
    assert cli("simulate", str(RUN), "--seed", "1", "--out", str(a)).returncode == 0
    assert cli("simulate", str(RUN), "--seed", "2", "--out", str(b)).returncode == 0
    (a / "events.parquet").write_bytes((b / "events.parquet").read_bytes())
    res = cli("observatory", "build", "--out", str(tmp_path / "site"), "--run", str(RUN), "--simulation", str(a),
              "--samples", "10")
    one_line_error(res, 2, "--simulation", "events.parquet not the file(s) result.json records")
    assert not (tmp_path / "site").exists()
    (a / "result.json").write_text((a / "result.json").read_text().replace('"files"', '"other"'))
    one_line_error(cli("observatory", "build", "--out", str(tmp_path / "site"), "--run", str(RUN), "--simulation",
                       str(a), "--samples", "10"), 2, "records no hashes")


def test_a_folder_written_whole_leaves_the_previous_one_when_its_writer_fails(tmp_path) -> None:
    from gpustack_compiler.base.atomic import write_folder

    out = tmp_path / "out"
    write_folder(out, lambda tmp: (tmp / "a").write_text("old"))

    def half(tmp: Path) -> None:
        (tmp / "a").write_text("new")
        raise RuntimeError("killed half way")
    with pytest.raises(RuntimeError):
        write_folder(out, half)
    assert [(p.name, p.read_text()) for p in out.iterdir()] == [("a", "old")]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    # a temporary folder of a writer that no longer runs is removed by the next write
    orphan = tmp_path / ".out.999999999.xyz"
    orphan.mkdir()
    write_folder(out, lambda tmp: (tmp / "a").write_text("newer"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"] and (out / "a").read_text() == "newer"


# ---- issue 41: misleading pages and docs -------------------------------------------------------------

def test_the_observatory_progress_follows_the_replay_not_a_staircase() -> None:
    # only the end of each stretch of compute was plotted, with step interpolation: flat for days
    from gpustack_sim.observatory import charts
    from gpustack_sim.observatory.collect import _series

    day = 86400 * 10**9
    rows = [{"replication": 0, "kind": "compute", "time_ns": 0, "duration_ns": 2 * day, "position": 0, "count": 200},
            {"replication": 0, "kind": "failure", "time_ns": 2 * day, "cause": "node"},
            {"replication": 0, "kind": "compute", "time_ns": 2 * day + day // 10, "duration_ns": day, "position": 150,
             "count": 100}]
    progress, failures, _ = _series(rows, [])
    assert [(p["day"], p["position"]) for p in progress] == [(0.0, 0), (2.0, 200), (2.1, 150), (3.1, 250)]
    assert failures == [{"day": 2.0, "cause": "node"}]
    spec = charts.progress({"progress": progress, "failures": failures})
    assert "interpolate" not in json.dumps(spec)  # straight lines between the replay's own points


def test_pages_print_no_literal_none_and_say_union() -> None:
    from gpustack_sim.observatory.render import _environment

    env = _environment()
    assert env.from_string("<td>{{ x }}</td>").render(x=None) == "<td>–</td>"
    roots = (REPO / "gpustack_sim" / "observatory" / "templates" / "roots.html").read_text()
    assert "summed" not in roots and "(union)" in roots


def test_the_conclusion_shown_is_the_one_at_this_catalog() -> None:
    # "latest conclusion" was the last artifact in hash order
    from gpustack_sim.experiments.log import conclusion_at

    results = [("passed", "virtual", "zzz-old"), ("failed_virtual_screen", "virtual", "abc-now")]
    assert conclusion_at(results, "abc-now") == "failed_virtual_screen (virtual stage)"
    assert conclusion_at(results, "new") == "not run at this catalog (2 result(s) at earlier ones)"
    assert conclusion_at([], "new") == "not run"


def test_experiment_list_prints_every_protocol(cli) -> None:
    res = cli("experiment", "list", "--json")
    assert res.returncode == 0, res.stderr
    rows = {r["protocol"]: r for r in strict_json(res.stdout)["protocols"]}
    assert {f"E00{i}@1" for i in range(1, 7)} <= set(rows) and all(r["frozen"] for r in rows.values())
    assert all(r["conclusion"] for r in rows.values())


def test_diff_text_shows_the_changed_part_of_a_long_value() -> None:
    # the text format cut every value at 80 characters: a change after them showed as two equal prefixes
    from gpustack_sim.cli.diff import _changed, _pair

    before = {"expression": "x" * 100 + " + a", "description": "same"}
    after = {"expression": "x" * 100 + " + b", "description": "same"}
    [(key, b, a)] = _changed("parts", before, after)
    shown = _pair(b, a)
    assert key == "parts.expression" and "+ a" in shown.split(" -> ")[0] and "+ b" in shown.split(" -> ")[1]


def test_a_copied_run_is_validated_like_a_file() -> None:
    # docs/api.md built a 512-GPU layout inside a 1,024-GPU run: model_copy skips validation
    from pydantic import ValidationError

    from gpustack_sim.engine.run_file import load_training_run

    run = load_training_run(RUN)
    with pytest.raises(ValidationError, match="tp\\*pp\\*dp\\*cp = 512 but gpus = 1024"):
        run.model_copy(update={"layout": run.layout.model_copy(update={"tp": 4, "dp": 32})})
    with pytest.raises(ValidationError):
        run.layout.model_copy(update={"tp": -1})
    wider = run.model_copy(update={"layout": run.layout.model_copy(update={"tp": 4, "dp": 64})})
    assert (wider.layout.tp, wider.layout.dp) == (4, 64) and wider.model_fields_set == run.model_fields_set


def test_a_sites_storage_bandwidth_bounds_the_checkpoint_write(cli, tmp_path) -> None:
    # storage_bandwidth was required and never used: 0 GB/s gave the results of 100 GB/s
    def replay(bandwidth: str):
        path = tmp_path / "sites.yaml"
        path.write_text(SITES.read_text().replace("storage_bandwidth: 100 GB/s", f"storage_bandwidth: {bandwidth}"))
        return cli("simulate", str(RUN), "--sites", str(path), "--days", "1", "--json")
    fast, slow = (strict_json(replay(b).stdout) for b in ("100 GB/s", "1 GB/s"))
    # 988 GB in halves at 100 GB/s per site: 4.9 s, inside the catalog's 43.8 s write; at 1 GB/s, 494 s
    assert fast["figures"]["checkpoints_completed"]["mean"] > 5 * slow["figures"]["checkpoints_completed"]["mean"]
    assert any("checkpoint interval raised" in n for n in slow["notes"])
    one_line_error(replay("0 GB/s"), 2, "sites[0].storage_bandwidth", "not positive")
    one_line_error(replay("1e-300 GB/s"), 2, "a checkpoint write takes", "longer than the longest replay")
