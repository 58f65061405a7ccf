"""A minimal valid catalog to break in one place per test."""

from __future__ import annotations

import shutil
from pathlib import Path

from gpustack_compiler import pipeline
from gpustack_compiler.findings import Findings
from gpustack_compiler.source import ManifestSource
from gpustack_sim import api

REPO = Path(__file__).resolve().parent.parent
CATALOG = REPO / "catalog"
SYSTEM_MODELINE = "# yaml-language-server: $schema=../../schemas/system.schema.json\n"

MINI_SYSTEMS = """# yaml-language-server: $schema=../schemas/systems.schema.json
headline_targets: [training.t_step]
systems:
  - {name: training, prefix: training, description: test}
  - {name: economics, prefix: econ, description: test}
"""

MINI_TRAINING = SYSTEM_MODELINE + """variables:
  - name: training.t_step
    units: s
    description: step time
    assumptions: [positive]
    references: [narayanan2021_megatron]
  - name: training.t_compute
    units: s
    description: compute time
    assumptions: [positive]
    references: [narayanan2021_megatron]
    root: {category: needs_calibration, family: timing}
  - name: training.t_comm
    units: s
    description: exposed communication
    assumptions: [nonnegative]
    references: [narayanan2021_megatron]
    root: {category: needs_calibration, family: timing}
relations:
  - name: training.t_step.sum
    kind: identity
    defines: training.t_step
    expression: training.t_compute + training.t_comm
    description: serial sum
    references: [narayanan2021_megatron]
"""


def mini_catalog(tmp_path: Path) -> Path:
    root = tmp_path / "catalog"
    root.mkdir()
    for name in ("units.yaml", "constants.yaml", "references.yaml"):
        shutil.copy(CATALOG / name, root / name)
    (root / "systems.yaml").write_text(MINI_SYSTEMS)
    (root / "training").mkdir()
    (root / "training" / "step.yaml").write_text(MINI_TRAINING)
    (root / "economics").mkdir()
    (root / "presets").mkdir()
    return root


def check(root: Path) -> Findings:
    return pipeline.run(root, None, write_manifest=False, use_cache=False).findings


def write_system(root: Path, system: str, body: str, name: str = "extra.yaml") -> Path:
    path = root / system / name
    path.write_text(SYSTEM_MODELINE + body)
    return path


def as_mapping(items) -> dict[str, str]:
    """`NAME=VALUE` items, as tests write them, for the engine's mappings."""
    return dict(item.split("=", 1) for item in items)


class Engine(api.Engine):
    """The library engine over a catalog compiled in memory, with shortcuts for tests."""

    def __init__(self, root: Path):
        result = pipeline.run(root, None, write_manifest=False, use_cache=False)
        assert result.manifest is not None, result.findings.render("text")
        self.manifest = result.manifest
        super().__init__(ManifestSource(self.manifest))

    def resolve(self, target, presets=(), assign=(), variants=(), **kw):
        scenario = self.scenarios.build(list(presets), as_mapping(assign), as_mapping(variants))
        return self.resolver.resolve(target, scenario, **kw)

    def value(self, target: str, presets=(), assign=(), variants=(), base_units: bool = False) -> float:
        """A value that must resolve completely; in declared units, or coherent base units if asked."""
        res = self.resolve(target, presets, assign, variants)
        assert res.missing == {}, res.missing
        return res.value * (self.manifest["variables"][target]["scale"] if base_units else 1.0)
