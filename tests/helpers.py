"""A minimal valid catalog to break in one place per test."""

from __future__ import annotations

import shutil
from pathlib import Path

from gpustack_compiler import pipeline
from gpustack_compiler.findings import Findings

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
