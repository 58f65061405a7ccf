"""What the learning model adds to an E001 virtual run (issue 38: at most 10%).

    python benchmarks/bench_learning_e001.py [--replications 50]

Runs E001 twice on a private copy of the catalog and experiments folder holding a synthetic-fixture
`calibration_learning` preset (clearly not a measurement: round values, territory H 1..16, K 1..4), so the
controller behaves alike in both: once with the progress metric's learning-model evaluation switched off
(the metric left unresolved), once with it resolving progress per FLOP for every replication. Prints both
wall times and the overhead. The synthetic preset never leaves the temporary folder.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

from gpustack_sim import Engine
from gpustack_sim.experiments.panels import e001
from gpustack_sim.experiments.panels.base import Unresolved
from gpustack_sim.experiments.runner import run_protocol
from gpustack_sim.experiments.workspace import Workspace

REPO = Path(__file__).resolve().parent.parent
FIXTURE = """# yaml-language-server: $schema=../../schemas/presets.schema.json
presets:
  - name: calibration_learning
    description: Synthetic fixture for a benchmark (round values, not a measurement).
    provenance: synthetic_fixture
    source: benchmarks/bench_learning_e001.py
    references: [hoffmann2022_chinchilla_loss]
    fit:
      method: none (fixture)
      data: [none]
      data_sha256: "0"
      rows: 0
      mape: 0
      max_abs_error: 0
      bias: 0
      territory:
        learning.fault.lost_share: [0, 0.1]
        learning.local_steps: [1, 16]
        learning.model.params: [2.0e+6, 2.0e+6]
        learning.replicas: [1, 4]
        learning.tokens: [4.0e+6, 8.0e+6]
    assignments:
      learning.loss.irreducible: {value: 1.2, units: nat/token}
      learning.loss.data_coeff: {value: 60, units: nat/token}
      learning.loss.data_exponent: 0.3
      learning.progress.local_step_penalty_sgd: 0.02
      learning.progress.local_step_penalty_diloco: 0.01
      learning.progress.staleness_penalty: 0.2
      learning.progress.replay_worth: 0.8
      learning.fault.corruption_damage: {value: 1.0e-8, units: nat/token**2}
      learning.loss.param_coeff: {value: 406.4, units: nat/token}
      learning.loss.param_exponent: 0.34
"""


def timed(root: Path, replications: int) -> tuple[float, str]:
    engine = Engine.open(root / "catalog", root / "build")
    ws = Workspace(root / "experiments", root)
    start = time.perf_counter()
    result = run_protocol("E001", workspace=ws, engine_factory=lambda: engine, replications=replications, write=False)
    progress = next(m for m in result.artifact.metrics if m.name == "progress_per_flop_ratio")
    return time.perf_counter() - start, f"{progress.status} {progress.point}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--replications", type=int, default=50)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for part in ("catalog", "experiments", "runs"):
            shutil.copytree(REPO / part, root / part)
        shutil.copytree(REPO / "schemas", root / "schemas")
        (root / "catalog" / "presets" / "calibration_learning.yaml").write_text(FIXTURE)
        progress = e001._progress
        e001._progress = lambda *a: Unresolved(())  # the same replay, no learning-model evaluation
        try:
            without, w_progress = timed(root, args.replications)
        finally:
            e001._progress = progress
        with_model, m_progress = timed(root, args.replications)
    print(f"E001, {args.replications} replications per arm")
    print(f"  without the learning model: {without:.2f} s (progress {w_progress})")
    print(f"  with the learning model:    {with_model:.2f} s (progress {m_progress})")
    print(f"  overhead: {100 * (with_model / without - 1):+.1f}% (target <= 10%)")


if __name__ == "__main__":
    main()
