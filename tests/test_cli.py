"""The command line as a user meets it: JSON on stdout, one-line errors, exit codes.

Commands run in this process (`gp`, the `gpustack_cli` fixture) unless the behaviour needs a process
of its own: exit codes and stderr as a shell sees them, and bytes identical across processes (whose
string hashes differ)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import CATALOG, REPO, CliResult, mini_catalog, run_cli, run_cli_here
from hypothesis import given, settings
from hypothesis import strategies as st

import gpustack_sim.engine.run  # noqa: F401  (the engine registers the run-file schema, as the CLI does)
from gpustack_compiler.build import schema as schema_mod
from gpustack_compiler.language.expressions import ExprError, parse


@pytest.fixture(scope="module")
def build(real_build: Path) -> Path:
    return real_build


def gp(build: Path, *args: str) -> CliResult:
    return run_cli_here("--catalog", str(CATALOG), "--build-dir", str(build), *args)


def test_real_catalog_checks_clean(build: Path) -> None:
    res = gp(build, "check", "--json")
    assert res.returncode == 0, res.stdout[-2000:]
    data = json.loads(res.stdout)
    assert data["errors"] == 0


def test_a_result_cached_by_another_compiler_is_not_reused(tmp_path: Path, monkeypatch) -> None:
    from gpustack_compiler.build import pipeline

    catalog, build = mini_catalog(tmp_path), tmp_path / "build"
    assert not pipeline.run(catalog, build, write_manifest=False).cached
    assert pipeline.run(catalog, build, write_manifest=False).cached
    monkeypatch.setattr(pipeline, "_compiler_digest", lambda: "a newer compiler")
    fresh = pipeline.run(catalog, build, write_manifest=False)
    assert not fresh.cached and fresh.manifest is not None


def test_compile_writes_deterministic_manifest(build: Path, tmp_path: Path) -> None:
    first = gp(build, "compile", "--json")
    assert first.returncode == 0, first.stderr
    info = json.loads(first.stdout)
    text = Path(info["manifest"]).read_text()
    other = tmp_path / "b2"
    second = run_cli("--catalog", str(CATALOG), "--build-dir", str(other), "compile", "--json")
    assert (other / "manifest.json").read_text() == text  # cold build in another process, byte-identical
    manifest = json.loads(text)
    assert manifest["schema_version"] == "1.3"
    assert manifest["catalog_hash"] == info["catalog_hash"] == json.loads(second.stdout)["catalog_hash"]
    rel = manifest["relations"]["econ.cost.per_token.ratio"]
    assert rel["inputs"] == ["econ.run.total_cost", "training.total_tokens"] and rel["latex"]
    assert manifest["variables"]["econ.cost.per_token"]["dimension"] == {"currency": "1", "token": "-1"}


def test_stats_json(build: Path) -> None:
    data = json.loads(gp(build, "stats", "--json").stdout)
    assert data["coverage"]["dimension_checks"] == 1.0
    assert data["cycles"] == 0
    assert data["topological_order_length"] == data["variables"] + data["constants"] + sum(
        v for k, v in data["relations_by_kind"].items() if k != "constraint")


def test_show_and_suggestion(build: Path) -> None:
    data = json.loads(gp(build, "show", "econ.cost.per_token", "--json").stdout)
    assert data["units"] == "USD/token" and data["defined_by"] == ["econ.cost.per_token.ratio"]
    res = gp(build, "show", "econ.cost.per_tokn")
    assert res.returncode == 2 and res.stdout == ""
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("Error: unknown name `econ.cost.per_tokn` (hint: did you mean econ.cost.per_token")


def test_cone_selectors(build: Path) -> None:
    full = json.loads(gp(build, "cone", "econ.cost.per_token", "--json").stdout)
    names = {n["name"] for n in full["nodes"]}
    assert {"training.total_tokens", "gpu.power.total", "thermal.facility.cooling_power"} <= names
    shallow = json.loads(gp(build, "cone", "1+econ.cost.per_token", "--json").stdout)
    assert {n["name"] for n in shallow["nodes"]} == {"econ.run.total_cost", "training.total_tokens"}
    down = json.loads(gp(build, "cone", "gpu.power.total+", "--json").stdout)
    assert down["direction"] == "downstream"
    assert "econ.cost.per_token" in {n["name"] for n in down["nodes"]}
    dot = gp(build, "cone", "econ.run.total_cost", "--format", "dot").stdout
    assert dot.startswith("digraph cone {") and '"econ.run.capex_cost" -> "econ.run.total_cost"' in dot


def test_root_debt_family_union(build: Path) -> None:
    roots = json.loads(gp(build, "root-debt", "--json", "--limit", "1000").stdout)
    fams = json.loads(gp(build, "root-debt", "--families", "--json", "--limit", "1000").stdout)
    by_family: dict[str, list] = {}
    for r in roots:
        by_family.setdefault(r["family"], []).append(r["weight"])
    for f in fams:
        members = by_family[f["family"]]
        assert f["roots"] == len(members)
        # the union is at least the heaviest member and at most the sum (no double counting)
        assert max(members) <= f["weight"] <= sum(members)
    assert roots == sorted(roots, key=lambda r: (-r["weight"], r["name"]))


def test_check_formats_and_exit_codes(tmp_path: Path) -> None:
    root = mini_catalog(tmp_path)
    (root / "training" / "bad.yaml").write_text("variables:\n  - name: training.x\n    units: furlong\n")
    # findings (1) and usage (2) as a shell sees them, from processes; the rest in this one
    res = run_cli("--catalog", str(root), "--build-dir", str(tmp_path / "b"), "check", "--format", "github")
    assert res.returncode == 1
    assert "::error file=catalog/training/bad.yaml,line=1,title=yaml.modeline::" in res.stdout
    assert "::error file=catalog/training/bad.yaml,line=2,title=schema.missing-field::" in res.stdout
    js = run_cli_here("--catalog", str(root), "--build-dir", str(tmp_path / "b"), "check", "--json")
    data = json.loads(js.stdout)
    assert js.returncode == 1 and data["errors"] >= 1
    assert {"id", "level", "message", "file", "line", "column", "context"} == set(data["findings"][0])
    comp = run_cli_here("--catalog", str(root), "--build-dir", str(tmp_path / "b"), "compile")
    assert comp.returncode == 1 and "Traceback" not in comp.stderr
    assert not (tmp_path / "b" / "manifest.json").exists()
    usage = run_cli("--catalog", str(root), "check", "--format", "xml")
    assert usage.returncode == 2 and "Traceback" not in usage.stderr


@pytest.mark.parametrize("args, says", [
    (("check", "--bogus"), "No such option: --bogus (hint: gpustack check --help)"),
    (("frobnicate",), "No such command 'frobnicate'."),
    (("resolve", "training.t_step", "--run", "x"), "No such option: --run"),
    (("estimate",), "no run given"),
])
def test_usage_errors_are_one_line(gpustack_cli, args: tuple[str, ...], says: str) -> None:
    res = gpustack_cli(*args)
    assert res.returncode == 2
    assert res.stderr.count("\n") == 1 and says in res.stderr and "Traceback" not in res.stderr


def test_committed_schemas_are_fresh() -> None:
    assert "run.schema.json" in schema_mod.SCHEMA_FILES
    assert schema_mod.stale(REPO / "schemas") == []


@settings(max_examples=400, deadline=None)
@given(st.text(max_size=200))
def test_parser_never_escapes(text: str) -> None:
    try:
        parse(text)
    except ExprError:
        pass


@settings(max_examples=200, deadline=None)
@given(st.from_regex(r"[a-z.()+\-*/ 0-9,']{0,60}", fullmatch=True))
def test_parser_on_expression_like_text(text: str) -> None:
    try:
        parsed = parse(text)
        assert isinstance(parsed.names, tuple)
    except ExprError as exc:
        assert exc.id.startswith("expr.")


MISSING = "/nonexistent/gpustack-test"
RUN_FILE = str(REPO / "runs" / "llama70b_1024xh100.yaml")


@pytest.mark.parametrize("args, path", [
    (("estimate", f"{MISSING}/run.yaml"), f"{MISSING}/run.yaml"),
    (("estimate", str(REPO / "runs")), str(REPO / "runs")),
    (("sweep", f"{MISSING}/run.yaml", "--grid", "tp=1,2"), f"{MISSING}/run.yaml"),
    (("calibrate", "--data", MISSING), MISSING),
    (("validate", f"{MISSING}/runs.csv"), f"{MISSING}/runs.csv"),
    (("--catalog", MISSING, "check"), MISSING),
    (("--catalog", MISSING, "show", "econ.cost.per_token"), MISSING),
    (("--catalog", MISSING, "estimate", RUN_FILE), MISSING),
    (("--catalog", MISSING, "schema", "--check"), MISSING),
    (("--catalog", str(CATALOG), "--build-dir", str(REPO / "README.md"), "compile"), str(REPO / "README.md")),
], ids=lambda a: " ".join(a).replace(str(REPO), "REPO") if isinstance(a, tuple) else "")
def test_a_missing_path_is_one_line_and_exit_2(gpustack_cli, args: tuple[str, ...], path: str) -> None:
    res = gpustack_cli(*args)
    assert res.returncode == 2 and res.stdout == "", res.stderr
    lines = res.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and path in lines[0], res.stderr
