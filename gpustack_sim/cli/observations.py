"""`gpustack observations list | lock`: the measured evidence in data/observations (docs/evaluation.md)."""

from __future__ import annotations

from pathlib import Path

import typer

from .app import JsonOpt, app, out

observations_app = typer.Typer(no_args_is_help=True, help="Measured evidence: list it, lock it.")
app.add_typer(observations_app, name="observations")

PathsArg = typer.Argument(None, help="Observation files or folders (default: data/observations).")


def _load(paths: list[Path] | None):
    from ..api import default_observations
    from ..engine.observation import load_observations

    return load_observations(list(paths) if paths else [default_observations()])


def _lock_path() -> Path:
    from ..api import default_observations
    from ..engine.observation import LOCK_NAME

    return default_observations().parent / LOCK_NAME


@observations_app.command("list")
def list_cmd(paths: list[Path] = PathsArg, as_json: bool = JsonOpt) -> None:
    """Every observation: id, split, panel, what it measures, and its source."""
    from ..engine.observation import superseded_by

    items = _load(paths)
    gone = superseded_by(items)
    rows = [{"id": i.obs.id, "split": i.obs.split, "panel": i.obs.panel, "variable": i.obs.measures.variable,
             "value": i.obs.measured.value, "units": i.obs.measured.units, "reference": i.obs.source.reference,
             "locator": i.obs.source.locator, "where": i.where, "sha256": i.sha256,
             "supersedes": i.obs.supersedes, "superseded_by": gone.get(i.obs.id)} for i in items]
    lines = [f"{r['id']:<44}{r['split']:<13}{r['variable']:<34}{r['value']:>10g} {r['units']:<9}"
             f"{r['reference']}, {r['locator']}"
             + (f"  [superseded by {r['superseded_by']}]" if r["superseded_by"] else "") for r in rows]
    if gone:
        lines.append(f"{len(items)} observations, {len(gone)} superseded (kept and locked; skipped by calibrate "
                     "and validate)")
    out(rows, "\n".join(lines), as_json)


@observations_app.command("lock")
def lock_cmd(check: bool = typer.Option(False, "--check", help="Only check: exit 1 if an observation is new, "
                                        "changed or gone."),
             as_json: bool = JsonOpt) -> None:
    """Add new observations to data/observations.lock; refuse any locked one that changed or disappeared."""
    from ..engine.observation import lock_problems, read_lock, update_lock

    items, path = _load(None), _lock_path()
    if check:
        lock = read_lock(path)
        problems = lock_problems(items, lock) + [f"{i.where}: observation `{i.obs.id}` is not in the lock yet"
                                                 for i in items if i.obs.id not in lock]
        out({"problems": problems}, "\n".join(problems) or f"{len(items)} observations match {path}", as_json)
        if problems:
            raise typer.Exit(1)
        return
    added = update_lock(path, items)
    out({"added": added, "lock": str(path)}, "\n".join(f"locked {a}" for a in added) or f"{path} is up to date",
        as_json)


@observations_app.command("seal")
def seal_cmd(folder: Path = typer.Argument(None, help="The sealed set's folder (default: data/sealed)."),
             check: bool = typer.Option(False, "--check", help="Only check the seal: exit 1 if it is broken."),
             as_json: bool = JsonOpt) -> None:
    """Seal an evaluation set by hash, once, before anything is scored (`validate --sealed` scores it)."""
    from ..api import default_observations
    from ..engine.sealed import seal, seal_problems, sealed_folder

    folder = folder or sealed_folder(default_observations())
    if check:
        problems = seal_problems(folder)
        out({"problems": problems}, "\n".join(problems) or f"{folder}: the seal holds", as_json)
        if problems:
            raise typer.Exit(1)
        return
    ids = seal(folder)
    out({"sealed": ids, "folder": str(folder)}, f"sealed {len(ids)} observations in {folder}", as_json)
