"""The sealed evaluation set (data/sealed/): published end-to-end runs written and locked by hash before the
model changes they are to judge, scored once, when an issue resolves, whatever the score.

A sealed set differs from data/observations in two ways. Its lock (`sealed.lock` in its folder) is written once:
an observation added later, changed or removed breaks the seal, and nothing is ever added to it. And `validate`
refuses a sealed observation unless it is asked to score the sealed set (`--sealed`), so no one sees its errors
while choosing a model change; with `--sealed` it scores only after the seal checks."""

from __future__ import annotations

import json
from pathlib import Path

from gpustack_compiler.base.errors import InputError

from .observation import LOCK_FORMAT, Loaded, load_observations, lock_problems, read_lock

LOCK_NAME = "sealed.lock"


def sealed_folder(observations: Path) -> Path:
    """data/sealed beside data/observations."""
    return observations.parent / "sealed"


def sealed_ids(folder: Path) -> set[str]:
    """Ids the seal holds (empty when there is no sealed set)."""
    return set(read_lock(folder / LOCK_NAME))


def is_sealed(item: Loaded, folder: Path, ids: set[str]) -> bool:
    """An observation is sealed if its file lies in the sealed folder or the seal holds its id (a copy of a
    sealed row elsewhere is still sealed)."""
    try:
        inside = item.file.resolve().is_relative_to(folder.resolve())
    except OSError:
        inside = False
    return inside or item.obs.id in ids


def seal_problems(folder: Path) -> list[str]:
    """What breaks the seal: no lock, an observation changed, gone, or added after the seal was written."""
    lock_path = folder / LOCK_NAME
    if not lock_path.exists():
        return [(f"{folder}: the sealed set has no {LOCK_NAME} (seal it with `gpustack observations seal` "
                 "before anything is scored)")]
    items = load_observations([folder])
    lock = read_lock(lock_path)
    return lock_problems(items, lock) + [f"{i.where}: observation `{i.obs.id}` was added after the set was sealed"
                                         for i in items if i.obs.id not in lock]


def seal(folder: Path) -> list[str]:
    """Write the seal of every observation in `folder`: once. Refuses a folder already sealed, a folder without
    observations, and calibration data (a sealed set only grades). Returns the ids sealed."""
    from gpustack_compiler.base.atomic import write_text

    lock_path = folder / LOCK_NAME
    if lock_path.exists():
        raise InputError(f"{lock_path}: the set is already sealed; a seal is written once",
                         "new runs go into a new sealed set after this one is scored")
    if not folder.is_dir():
        raise InputError(f"{folder}: no such folder")
    items = load_observations([folder])
    if not items:
        raise InputError(f"{folder}: no observations to seal")
    wrong = [i for i in items if i.obs.split != "evaluation"]
    if wrong:
        raise InputError(f"{wrong[0].where}: observation `{wrong[0].obs.id}` is {wrong[0].obs.split} data; a sealed "
                         "set holds evaluation data only")
    text = json.dumps({"format": LOCK_FORMAT, "sealed": True,
                       "observations": dict(sorted((i.obs.id, i.sha256) for i in items))}, indent=2) + "\n"
    write_text(lock_path, text)
    return sorted(i.obs.id for i in items)
