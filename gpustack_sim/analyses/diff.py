"""What a change to the catalog does, compared with a git ref: entries added, removed and changed, which
headline targets' cones it reaches and how many variables it moves, and how every run file's estimate
moves (before -> after).

The base catalog and run files are exported from git (`git archive`, no checkout, the work tree is never
touched) into a temporary folder and compiled there; the work tree's are compiled where they are."""

from __future__ import annotations

import io
import subprocess
import tarfile
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpustack_compiler.base.errors import GpustackError, InputError
from gpustack_compiler.manifest.serialise import graph_of

from ..compiled import compile_catalog

# What is compared per kind of entry: a change to any of these fields is reported with before and after.
FIELDS = {
    "variables": ("units", "dimension", "references", "description", "is_root", "root", "bounds", "assumptions"),
    "constants": ("units", "dimension", "value", "references"),
    "relations": ("kind", "defines", "constrains", "parts", "inputs", "variant", "references", "leaves_out"),
    "presets": ("assignments", "variants", "modes", "provenance", "references"),
    "references": ("citation", "year", "url", "doi", "kind"),
}
TOP_MOVES = 5


@dataclass
class Change:
    kind: str  # variables, constants, relations, presets, references
    name: str
    status: str  # added, removed, changed
    fields: dict[str, tuple[object, object]] = field(default_factory=dict)  # field -> (before, after)
    file: str | None = None
    line: int | None = None

    def to_dict(self) -> dict:
        return {"kind": self.kind, "name": self.name, "status": self.status, "file": self.file, "line": self.line,
                "fields": {k: {"before": b, "after": a} for k, (b, a) in sorted(self.fields.items())}}


@dataclass
class FigureDelta:
    label: str
    target: str
    units: str
    before: float | None
    after: float | None

    @property
    def percent(self) -> float | None:
        if self.before is None or self.after is None or self.before == 0:
            return None
        return (self.after - self.before) / abs(self.before) * 100

    def to_dict(self) -> dict:
        return {"label": self.label, "target": self.target, "units": self.units, "before": self.before,
                "after": self.after, "percent": self.percent}


@dataclass
class RunDelta:
    run: str
    figures: list[FigureDelta] = field(default_factory=list)
    error_before: str | None = None
    error_after: str | None = None

    @property
    def moved(self) -> list[FigureDelta]:
        """Figures whose value changed, the largest relative moves first."""
        changed = [f for f in self.figures if f.before != f.after]
        return sorted(changed, key=lambda f: (-(abs(f.percent) if f.percent is not None else float("inf")), f.label))

    def to_dict(self) -> dict:
        return {"run": self.run, "error_before": self.error_before, "error_after": self.error_after,
                "figures": [f.to_dict() for f in self.figures], "moved_most": [f.label for f in self.moved[:TOP_MOVES]]}


@dataclass
class CatalogDiff:
    base: str  # the ref as given
    commit: str  # what it resolved to
    changes: list[Change]
    blast: dict[str, int]  # headline target -> variables of its cone (itself included) that the change reaches
    reached: int  # variables the change reaches in all
    runs: list[RunDelta]

    def to_dict(self) -> dict:
        return {"base": self.base, "commit": self.commit, "changes": [c.to_dict() for c in self.changes],
                "blast_radius": {"targets": self.blast, "variables": self.reached},
                "runs": [r.to_dict() for r in self.runs]}


# ---- git -----------------------------------------------------------------------------------------

def _git(repo: Path, *args: str, binary: bool = False):
    try:
        done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, check=False)
    except FileNotFoundError:
        raise InputError("git is not installed", "gpustack diff reads the base catalog with git") from None
    if done.returncode != 0:
        return None
    return done.stdout if binary else done.stdout.decode().strip()


def commit_of(repo: Path, ref: str) -> str:
    commit = _git(repo, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    if not commit:
        raise InputError(f"--base {ref}: not a commit of the repository at {repo}", "try --base HEAD or a branch name")
    return commit


def export(repo: Path, commit: str, paths: list[str], into: Path) -> None:
    """Write `paths` (relative to the repository top) as they are at `commit` into `into`."""
    present = [p for p in paths if _git(repo, "cat-file", "-e", f"{commit}:{p}") is not None]
    if present:
        data = _git(repo, "archive", "--format=tar", commit, "--", *present, binary=True)
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            tar.extractall(into, filter="data")


# ---- comparison ----------------------------------------------------------------------------------

def entry_changes(before: dict, after: dict) -> list[Change]:
    out = []
    for kind, fields in FIELDS.items():
        b, a = before.get(kind, {}), after.get(kind, {})
        for name in sorted(set(b) | set(a)):
            where = a.get(name) or b.get(name)
            file, line = where.get("file"), where.get("line")
            if name not in b:
                out.append(Change(kind, name, "added", file=file, line=line))
            elif name not in a:
                out.append(Change(kind, name, "removed", file=file, line=line))
            else:
                diff = {f: (b[name].get(f), a[name].get(f)) for f in fields if b[name].get(f) != a[name].get(f)}
                if diff:
                    out.append(Change(kind, name, "changed", diff, file, line))
    return out


def _touched(changes: list[Change], before: dict, after: dict) -> set[str]:
    """Variables a change acts on directly: changed or added ones, those a changed relation defines or
    constrains, and those a changed preset assigns differently."""
    out: set[str] = set()
    for c in changes:
        if c.kind in ("variables", "constants"):
            out.add(c.name)
        elif c.kind == "relations":
            for m in (before, after):
                rel = m["relations"].get(c.name) or {}
                out.update(n for n in [rel.get("defines"), *(rel.get("constrains") or [])] if n)
        elif c.kind == "presets":
            old = (before["presets"].get(c.name) or {}).get("assignments", {})
            new = (after["presets"].get(c.name) or {}).get("assignments", {})
            out.update(n for n in set(old) | set(new) if old.get(n) != new.get(n))
            out.update(n for n in set(_variants(before, c.name)) | set(_variants(after, c.name))
                       if _variants(before, c.name).get(n) != _variants(after, c.name).get(n))
    return out


def _variants(manifest: dict, preset: str) -> dict:
    return (manifest["presets"].get(preset) or {}).get("variants", {})


def blast_radius(changes: list[Change], before: dict, after: dict) -> tuple[dict[str, int], int]:
    """Per headline target, how many variables of its upstream cone (itself included) the change reaches;
    and how many variables it reaches in all (downstream of what it touches, in the new graph)."""
    graph = graph_of(after)
    names = set(after["variables"]) | set(after["constants"])
    reached: set[str] = set()
    for name in _touched(changes, before, after):
        if name in names:
            reached.add(name)
            reached.update(graph.cone(name, upstream=False))
    blast = {}
    for target in after.get("headline_targets", []):
        if target in after["variables"]:
            cone = set(graph.cone(target)) | {target}
            blast[target] = len(cone & reached)
    return blast, len(reached)


def _estimate(engine, path: Path) -> tuple[dict[str, tuple[str, str, float | None]], str | None]:
    try:
        est = engine.estimate(engine.load_run(path), samples=0)
    except GpustackError as exc:
        return {}, str(exc)
    return {f.target: (f.label, f.units, f.value) for f in est.figures}, None


def run_deltas(before_engine, after_engine, before_runs: Path, after_runs: Path) -> list[RunDelta]:
    """Point estimates (no sampling: a delta is about the model, not the draws) of every run file, before
    and after; a run file added or removed is compared with nothing."""
    files = sorted({p.name for d in (before_runs, after_runs) if d.is_dir() for p in d.glob("*.yaml")})
    out = []
    for name in files:
        delta = RunDelta(f"runs/{name}")
        old, delta.error_before = _estimate(before_engine, before_runs / name) if (before_runs / name).is_file() \
            else ({}, "no such run file at the base")
        new, delta.error_after = _estimate(after_engine, after_runs / name) if (after_runs / name).is_file() \
            else ({}, "run file removed")
        for target in list(dict.fromkeys([*new, *old])):
            label, units, _ = new.get(target) or old[target]
            delta.figures.append(FigureDelta(label, target, units, (old.get(target) or (0, 0, None))[2],
                                             (new.get(target) or (0, 0, None))[2]))
        out.append(delta)
    return out


def catalog_diff(catalog: str | Path, base: str, runs: str | Path | None,
                 engine_for: Callable[[dict], Any]) -> CatalogDiff:
    """The change from `base` (a git ref) to the work tree, for the catalog folder `catalog` and the run
    files in `runs` (default: runs/ beside the catalog). `engine_for(manifest)` opens an engine over a
    compiled manifest (the facade lives above this layer: `Engine.diff`)."""
    catalog = Path(catalog).resolve()
    runs_dir = Path(runs).resolve() if runs is not None else catalog.parent / "runs"
    top = _git(catalog, "rev-parse", "--show-toplevel") if catalog.is_dir() else None
    if not top:
        raise InputError(f"{catalog}: not a catalog inside a git repository", "gpustack diff compares with a git ref")
    top_path = Path(top).resolve()
    rel_catalog = catalog.relative_to(top_path).as_posix()
    rel_runs = runs_dir.relative_to(top_path).as_posix() if runs_dir.is_relative_to(top_path) else None
    commit = commit_of(top_path, base)
    after = compile_catalog(catalog, None).manifest
    with tempfile.TemporaryDirectory(prefix="gpustack-diff-") as tmp:
        export(top_path, commit, [p for p in (rel_catalog, rel_runs) if p], Path(tmp))
        base_catalog = Path(tmp) / rel_catalog
        if not base_catalog.is_dir():
            raise InputError(f"--base {base}: there is no {rel_catalog}/ at {commit[:12]}")
        try:
            before = compile_catalog(base_catalog, None).manifest
        except GpustackError as exc:
            raise InputError(f"--base {base}: the catalog at {commit[:12]} does not compile ({exc})") from None
        changes = entry_changes(before, after)
        blast, reached = blast_radius(changes, before, after)
        base_runs = Path(tmp) / rel_runs if rel_runs else Path(tmp) / "runs"
        deltas = run_deltas(engine_for(before), engine_for(after), base_runs, runs_dir)
    return CatalogDiff(base, commit, changes, blast, reached, deltas)
