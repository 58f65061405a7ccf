"""Reading a run file of either kind: a training run (run.py) or a serving run (serve_run.py)."""

from __future__ import annotations

from pathlib import Path

from gpustack_compiler.base.documents import read_mapping, validate
from gpustack_compiler.base.errors import InputError

from .run import RunSpec, apply_overrides
from .serve_run import ServeRunSpec


def load_run(path: Path | None, overrides: list[str] = ()) -> RunSpec | ServeRunSpec:
    """Read a run file (or, without one, build the run from `--set` flags alone): a serving run when it
    says `kind: serving` (serve_run.py), else a training run. Every problem is one line naming the file,
    line and field (or the flag)."""
    if path is None and not overrides:
        raise InputError("no run given: pass a run file (see runs/) or describe the run with --set FIELD=VALUE flags")
    data = read_mapping(path, "run file") if path is not None else {}
    apply_overrides(data, list(overrides))
    model = ServeRunSpec if data.get("kind") == "serving" else RunSpec
    return validate(model, data, str(path) if path is not None else "--set")


def load_training_run(path: Path | None, overrides: list[str] = ()) -> RunSpec:
    """A training run file; a serving run file is refused with one line."""
    run = load_run(path, overrides)
    if not isinstance(run, RunSpec):
        raise InputError(f"{path}: a serving run file (kind: serving); this command takes a training run")
    return run
