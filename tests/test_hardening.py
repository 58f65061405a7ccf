"""Regression tests for every failure class the fuzzing campaign of issue 17 found: tracebacks in `check`
and in commands, missing resource limits, and silently wrong results. Each case is the one the campaign
reported; each failed before its fix."""

from __future__ import annotations

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
