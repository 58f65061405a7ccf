"""One small bad catalog per finding id: the finding names its id, file and line."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from helpers import CATALOG, SYSTEM_MODELINE, check, mini_catalog

VAR = """  - name: {name}
    units: {units}
    description: a variable
    references: [narayanan2021_megatron]
    root: {{category: scenario_boundary, family: test}}
"""


def rel(name: str, defines: str, expression: str, kind: str = "identity", extra: str = "") -> str:
    return (f"  - name: {name}\n    kind: {kind}\n    defines: {defines}\n    expression: \"{expression}\"\n"
            f"    description: a relation\n    references: [narayanan2021_megatron]\n{extra}")


def econ(body: str) -> tuple[str, str]:
    return "economics/bad.yaml", SYSTEM_MODELINE + body


def binding(kind: str, body: str) -> tuple[str, str]:
    return f"bindings/{kind}.yaml", f"# yaml-language-server: $schema=../../schemas/{kind}.schema.json\n" + body


FIGURES = ("figures:\n  - {{label: step time, variable: {figure}}}\n"
           "memory: {{per_gpu: training.t_step, capacity: training.t_step, buffers: training.t_comm}}\n"
           "objectives:\n  step_time: {{variable: training.t_step, best: min}}\n")
TRAINING_REPLAY = ("parameters:\n  - {{field: step_time_s, variable: training.t_step}}\n"
                   "model_sync: {{params: training.t_step, bytes_per_param: training.t_comm}}\n"
                   "job_failure_rate: {{variable: training.t_step, fleet_variant: turbo}}\n"
                   "fleet_class: {{name: fleet, rate: training.t_comm, per: node}}\n"
                   "failure_classes:\n  - {{name: gpu, rate: {rate}, per: gpu}}\n"
                   "aggregate_classes:\n  - {{name: any, rate: training.t_comm, per: gpu, parts: [gpus]}}\n")
MEASURED = ("columns:\n  - {column: model, field: name}\nhardware:\n"
            "  gpu_x: {presets: [no_such_preset], description: d}\nprecision: {}\n"
            "measures:\n  - {column: seconds, variable: training.t_step}\n")


# (finding id, file to write, its text, expected line of the finding)
CASES = [
    ("yaml.syntax", *econ("variables:\n  - name: econ.x\n    units: [unclosed\n"), 5),
    ("yaml.modeline", "economics/bad.yaml", "variables: []\n", 1),
    ("yaml.duplicate-key", *econ("variables:\n" + VAR.format(name="econ.x", units="USD")
                                 + "    units: W\n"), 8),
    ("schema.unknown-key", *econ("variables:\n" + VAR.format(name="econ.x", units="USD") + "    colour: red\n"), 8),
    ("schema.missing-field", *econ("variables:\n  - name: econ.x\n    description: d\n"
                                   "    references: [narayanan2021_megatron]\n"), 3),
    ("schema.invalid", *econ("variables:\n" + VAR.format(name="econ.x", units="USD")
                             + "    assumptions: [purple]\n"), 8),
    ("catalog.unknown-file", "mystery/thing.yaml", SYSTEM_MODELINE + "variables: []\n", 1),
    ("name.format", *econ("variables:\n" + VAR.format(name="econ.Bad-Name", units="USD")), 3),
    ("name.prefix", *econ("variables:\n" + VAR.format(name="training.elsewhere", units="USD")), 3),
    ("name.duplicate", *econ("variables:\n" + VAR.format(name="econ.x", units="USD")
                             + VAR.format(name="econ.x", units="USD")), 8),
    ("unit.invalid", *econ("variables:\n" + VAR.format(name="econ.x", units="furlong")), 4),
    ("unit.ambiguous", *econ("variables:\n" + VAR.format(name="econ.x", units="h")), 4),
    ("ref.missing", *econ("variables:\n  - name: econ.x\n    units: USD\n    description: d\n"
                          "    root: {category: scenario_boundary, family: t}\n"), 3),
    ("ref.unknown", *econ("variables:\n" + VAR.format(name="econ.x", units="USD").replace(
        "narayanan2021_megatron", "no_such_paper")), 6),
    ("variable.assumptions", *econ("variables:\n" + VAR.format(name="econ.x", units="USD")
                                   + "    assumptions: [positive, negative]\n"), 8),
    ("variable.bounds", *econ("variables:\n" + VAR.format(name="econ.x", units="USD")
                              + "    bounds: {min: 2, max: 1}\n"), 8),
    ("expr.syntax", *econ("relations:\n" + rel("econ.r", "training.t_step", "training.t_compute +")), 3),
    ("expr.forbidden", *econ("relations:\n" + rel("econ.r", "training.t_step",
                                                 "__import__('os').system('touch /tmp/gpustack-pwned')")), 3),
    ("expr.too-large", *econ("relations:\n" + rel("econ.r", "training.t_step", "training.t_compute * 2**(9**9)")), 3),
    ("expr.unknown-name", *econ("relations:\n" + rel("econ.r", "training.t_step", "training.t_compte")), 3),
    ("expr.kind", *econ("relations:\n" + rel("econ.r", "training.t_step", "training.t_compute > 0")), 3),
    ("relation.unknown-target", *econ("relations:\n" + rel("econ.r", "econ.nothing", "training.t_compute")), 3),
    ("relation.defines-constant", *econ("relations:\n" + rel("econ.r", "const.c", "training.t_compute")), 3),
    ("dim.mismatch", *econ("relations:\n" + rel("econ.r", "training.t_step", "training.t_compute * const.c")), 3),
    ("dim.function-arg", *econ("relations:\n" + rel("econ.r", "training.t_step",
                                                   "training.t_compute * exp(training.t_comm)")), 3),
    ("dim.exponent", *econ("relations:\n" + rel("econ.r", "training.t_step",
                                               "training.t_compute ** training.t_comm")), 3),
    ("dim.undecided", *econ("variables:\n" + VAR.format(name="econ.alpha", units='"1"') + "relations:\n"
                            + rel("econ.r", "training.t_step", "training.t_compute ** econ.alpha")), 9),
    ("dim.condition", *econ("relations:\n" + rel("econ.r", "training.t_step", "training.t_compute",
                                                kind="approximation",
                                                extra="    validity: (training.t_comm < training.t_compute) + 1 > 0\n")),
     3),
    ("graph.cycle", *econ("variables:\n" + VAR.format(name="econ.a", units="s").replace(
        "    root: {category: scenario_boundary, family: test}\n", "") + VAR.format(
        name="econ.b", units="s").replace("    root: {category: scenario_boundary, family: test}\n", "")
        + "relations:\n" + rel("econ.a.from_b", "econ.a", "econ.b") + rel("econ.b.from_a", "econ.b", "econ.a")), 18),
    ("graph.duplicate-identity", *econ("relations:\n" + rel("econ.r", "training.t_step", "2 * training.t_compute")), 3),
    ("graph.ambiguous-definition", *econ("relations:\n" + rel("econ.r", "training.t_step", "training.t_compute",
                                                             kind="variant", extra="    variant: fast\n")), 3),
    ("graph.duplicate-variant", *econ("variables:\n" + VAR.format(name="econ.y", units="s").replace(
        "    root: {category: scenario_boundary, family: test}\n", "") + "relations:\n"
        + rel("econ.y.a", "econ.y", "training.t_compute", kind="variant", extra="    variant: k\n")
        + rel("econ.y.b", "econ.y", "training.t_comm", kind="variant", extra="    variant: k\n")), 15),
    ("graph.root-undeclared", *econ("variables:\n  - name: econ.lonely\n    units: USD\n    description: d\n"
                                    "    references: [narayanan2021_megatron]\n"), 3),
    ("graph.orphan", *econ("variables:\n" + VAR.format(name="econ.unused", units="USD")), 3),
    ("graph.root-defined", *econ("variables:\n" + VAR.format(name="econ.z", units="s") + "relations:\n"
                                 + rel("econ.z.def_", "econ.z", "training.t_compute")), 3),
    ("preset.unknown-variable", "presets/p.yaml",
     "# yaml-language-server: $schema=../../schemas/presets.schema.json\npresets:\n  - name: p\n"
     "    description: d\n    provenance: synthetic_fixture\n    source: test\n    assignments:\n"
     "      training.t_compte: 1 s\n", 8),
    ("preset.unit-mismatch", "presets/p.yaml",
     "# yaml-language-server: $schema=../../schemas/presets.schema.json\npresets:\n  - name: p\n"
     "    description: d\n    provenance: synthetic_fixture\n    source: test\n    assignments:\n"
     "      training.t_compute: 5 W\n", 8),
    ("preset.invalid-value", "presets/p.yaml",
     "# yaml-language-server: $schema=../../schemas/presets.schema.json\npresets:\n  - name: p\n"
     "    description: d\n    provenance: synthetic_fixture\n    source: test\n    assignments:\n"
     "      training.t_compute: fast\n", 8),
    ("catalog.unknown-file", *binding("extras", "figures: []\n"), 1),
    ("binding.unknown-variable", *binding("figures", FIGURES.format(figure="training.t_stepx")), 3),
    ("binding.unit-mismatch", *binding("run_fields", "variables:\n"
                                       "  - {field: layers, variable: training.t_compute, units: W}\n"), 3),
    ("binding.invalid-value", *binding("run_fields", "variables:\n  - field: speed\n"
                                       "    variable: training.t_compute\n    read: enumeration\n"
                                       "    values: {fast: quick}\n"), 6),
    ("binding.unknown-variant", *binding("run_fields", "variables: []\nmodes:\n  - {always: turbo, reason: r}\n"), 4),
    ("binding.unknown-preset", *binding("measured_runs", MEASURED), 5),
    # The training replay's failure classes: their rates, the fleet variant and the parts an aggregate replaces.
    ("binding.unknown-variable", *binding("training_replay", TRAINING_REPLAY.format(rate="training.t_stepx")), 8),
    ("binding.unknown-variant", *binding("training_replay", TRAINING_REPLAY.format(rate="training.t_step")), 5),
    ("binding.unknown-class", *binding("training_replay", TRAINING_REPLAY.format(rate="training.t_step")), 10),
    ("binding.duplicate", *binding("calibration_fit", "parameters:\n"
                                   "  - {key: eff, roots: [training.t_compute], initial: 1, low: 0, high: 2}\n"
                                   "held:\n  - {variable: training.t_compute, value: 1, units: s, reason: r}\n"), 5),
    # A generation's held root is checked like the end-to-end ones, at its own line.
    ("binding.unknown-variable", *binding("calibration_fit", "parameters:\n"
                                          "  - {key: eff, roots: [training.t_compute], initial: 1, low: 0, high: 2}\n"
                                          "components:\n  parameters:\n"
                                          "    - {key: c, roots: [training.t_step], initial: 1, low: 0, high: 2}\n"
                                          "  generations:\n    - key: g\n      gpu_presets: [p]\n      preset: q\n"
                                          "      held:\n        - {variable: training.t_stepp, value: 1, units: s,"
                                          " reason: r}\n"), 12),
    ("schema.invalid", *binding("run_fields", "variables:\n  - {field: layers, variable: training.t_compute, "
                                "read: enumeration}\n"), 3),
    ("preset.unknown-variant", "presets/p.yaml",
     "# yaml-language-server: $schema=../../schemas/presets.schema.json\npresets:\n  - name: p\n"
     "    description: d\n    provenance: synthetic_fixture\n    source: test\n    variants:\n"
     "      training.t_step: turbo\n", 8),
]


@pytest.mark.parametrize("fid,path,text,line", CASES, ids=[c[0] for c in CASES])
def test_finding(tmp_path: Path, fid: str, path: str, text: str, line: int) -> None:
    root = mini_catalog(tmp_path)
    target = root / path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)
    findings = check(root)
    hits = [f for f in findings.items if f.id == fid and f.file == f"catalog/{path}"]
    assert hits, f"no {fid} finding in {path}; got {[f.as_text() for f in findings.items]}"
    assert hits[0].line == line, hits[0].as_text()


def test_cycle_is_a_readable_path(tmp_path: Path) -> None:
    root = mini_catalog(tmp_path)
    target = root / "economics" / "bad.yaml"
    target.write_text(next(c[2] for c in CASES if c[0] == "graph.cycle"))
    hit = next(f for f in check(root).items if f.id == "graph.cycle")
    assert hit.message == "cycle: econ.a --> econ.b --> econ.a"
    assert hit.context == "via econ.b.from_a, econ.a.from_b"


def test_mini_catalog_is_clean(tmp_path: Path) -> None:
    assert check(mini_catalog(tmp_path)).items == []


def test_nothing_runs(tmp_path: Path) -> None:
    marker = Path("/tmp/gpustack-pwned")
    marker.unlink(missing_ok=True)
    root = mini_catalog(tmp_path)
    (root / "economics" / "bad.yaml").write_text(SYSTEM_MODELINE + "relations:\n" + rel(
        "econ.r", "training.t_step", "__import__('os').system('touch /tmp/gpustack-pwned')"))
    findings = check(root)
    assert any(f.id == "expr.forbidden" for f in findings.items)
    assert not marker.exists()


def test_yaml_tags_and_aliases_refused(tmp_path: Path) -> None:
    root = mini_catalog(tmp_path)
    (root / "economics" / "bad.yaml").write_text(
        SYSTEM_MODELINE + "variables: !!python/object/apply:os.system ['touch /tmp/gpustack-pwned']\n")
    (root / "economics" / "alias.yaml").write_text(
        SYSTEM_MODELINE + "a: &x [1, 2]\nvariables: *x\n")
    findings = check(root)
    ids = {(f.file, f.id) for f in findings.items}
    assert ("catalog/economics/bad.yaml", "yaml.syntax") in ids
    assert ("catalog/economics/alias.yaml", "yaml.syntax") in ids
    assert not Path("/tmp/gpustack-pwned").exists()


def test_one_bad_entry_does_not_hide_the_rest(tmp_path: Path) -> None:
    root = mini_catalog(tmp_path)
    (root / "economics" / "bad.yaml").write_text(SYSTEM_MODELINE + "variables:\n"
                                                 + VAR.format(name="econ.x", units="furlong")
                                                 + VAR.format(name="econ.y", units="USD")
                                                 + "relations:\n" + rel("econ.r", "training.t_step", "econ.y"))
    ids = [f.id for f in check(root).errors]
    # econ.y stays known (no unknown-name cascade); the relation's real problems are reported.
    assert "unit.invalid" in ids and "expr.unknown-name" not in ids
    assert "dim.mismatch" in ids and "graph.duplicate-identity" in ids


def test_missing_root_file(tmp_path: Path) -> None:
    root = mini_catalog(tmp_path)
    (root / "references.yaml").unlink()
    hits = [f for f in check(root).items if f.id == "catalog.missing"]
    assert [(f.file, f.line) for f in hits] == [("catalog/references.yaml", 1)]


def test_unknown_headline_target(tmp_path: Path) -> None:
    root = mini_catalog(tmp_path)
    text = (root / "systems.yaml").read_text().replace("headline_targets: [training.t_step]",
                                                         "headline_targets: [training.t_step, econ.nothing]")
    (root / "systems.yaml").write_text(text)
    hits = [f for f in check(root).items if f.id == "catalog.unknown-headline"]
    assert [(f.file, f.line) for f in hits] == [("catalog/systems.yaml", 2)]
    assert "econ.nothing" in hits[0].message


def test_a_renamed_variable_is_found_in_the_bindings(tmp_path: Path) -> None:
    # Renamed everywhere but in catalog/bindings/: the binding that still says the old name is the finding.
    root = tmp_path / "catalog"
    shutil.copytree(CATALOG, root)
    for path in root.rglob("*.yaml"):
        if path.parent.name != "bindings":
            path.write_text(re.sub(r"\barch\.n_layers\b", "arch.n_layer", path.read_text()))
    findings = check(root)
    # Every bindings file that still says the old name: the training and the serving run fields.
    expected = [("binding.unknown-variable", f"catalog/bindings/{name}", line) for name in ("run_fields.yaml",
                                                                                           "serve_fields.yaml")
                for line in [next(i for i, text in enumerate((root / "bindings" / name).read_text().splitlines(), 1)
                                  if "variable: arch.n_layers" in text)]]
    assert sorted((f.id, f.file, f.line) for f in findings.errors) == expected
    assert "did you mean arch.n_layer," in findings.errors[0].message  # the suggestion names the new name


def test_the_bindings_are_clean_and_complete(tmp_path: Path) -> None:
    root = mini_catalog(tmp_path)
    (root / "bindings").mkdir()
    path, text = binding("figures", FIGURES.format(figure="training.t_step"))
    (root / path).write_text(text)
    assert check(root).items == []


@pytest.mark.parametrize("folder,message", [
    ("mystery", "folder `mystery` is not a system declared in catalog/systems.yaml"),
    ("economic", "folder `economic` is not a system declared in catalog/systems.yaml; did you mean economics?"),
])
def test_suggestion_only_when_something_is_close(tmp_path: Path, folder: str, message: str) -> None:
    root = mini_catalog(tmp_path)
    (root / folder).mkdir()
    (root / folder / "thing.yaml").write_text(SYSTEM_MODELINE + "variables: []\n")
    hit = next(f for f in check(root).items if f.id == "catalog.unknown-file")
    assert hit.message == message
