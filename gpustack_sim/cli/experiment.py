"""`gpustack experiment list | check | freeze | audit | run | log`: preregistered protocols, their power audit,
runs on the virtual datacenter and the results log (docs/experiments.md)."""

from __future__ import annotations

import time
from pathlib import Path

import typer

from .app import JsonOpt, app, engine, err, out, replications_option, seed_option, settings
from .workers import SchedulerOpt, WorkersOpt, chunked

experiment_app = typer.Typer(no_args_is_help=True,
                             help="Preregistered experiments: list, check, freeze, audit, run, log.")
app.add_typer(experiment_app, name="experiment")

DirOpt = typer.Option(None, "--dir", envvar="GPUSTACK_EXPERIMENTS",
                      help="Experiments folder (default: experiments/ beside the catalog).")


def _workspace(ctx: typer.Context, directory: Path | None):
    from ..experiments import Workspace

    root = settings(ctx).catalog.resolve().parent  # scenario files are relative to the repository root
    return Workspace.at(directory if directory is not None else root / "experiments", root)


def _units(ctx: typer.Context):
    from gpustack_compiler.language.units import UnitSystem

    from ..api import Engine

    s = settings(ctx)
    return UnitSystem.from_manifest(Engine.compile(s.catalog, s.build).manifest["units"])


@experiment_app.command("check")
def check_cmd(ctx: typer.Context, directory: Path = DirOpt, as_json: bool = JsonOpt) -> None:
    """Check every protocol (schema, metrics, falsifiers, units) and whether it matches its frozen copy."""
    from gpustack_compiler.base.errors import InputError

    from ..experiments import check
    from ..experiments.lock import modified_error

    ws = _workspace(ctx, directory)
    statuses = check(ws, _units(ctx))
    lines = [f"{s.key:<10} {s.lock:<9} {s.sha256[:12]}  {s.path}  {s.title}" for s in statuses]
    out({"protocols": [s.to_dict() for s in statuses]}, "\n".join(lines) or "no protocols", as_json)
    bad = next((s for s in statuses if s.lock == "modified"), None)
    if bad is not None:
        p = ws.load(bad.key, _units(ctx))
        raise modified_error(p, list(bad.differing_fields))
    if not statuses and not ws.protocols_dir.is_dir():
        raise InputError(f"{ws.shown(ws.protocols_dir)}: no protocols folder", "pass --dir")


@experiment_app.command("list")
def list_cmd(ctx: typer.Context, directory: Path = DirOpt, as_json: bool = JsonOpt) -> None:
    """Every protocol: its title, whether it is frozen, and what it concluded at this catalog."""
    from ..api import Engine
    from ..experiments.log import artifacts, conclusion_at

    s = settings(ctx)
    manifest = Engine.compile(s.catalog, s.build).manifest
    ws = _workspace(ctx, directory)
    lock = ws.lock()
    results: dict[tuple[str, int], list] = {}
    for _, art in artifacts(ws):
        results.setdefault((art.protocol.id, art.protocol.version), []).append(
            (art.conclusion, art.stage, art.catalog_hash))
    rows = []
    for p in sorted(ws.load_all(_units(ctx)), key=lambda p: (p.spec.id, p.spec.version)):
        entry = lock.get(p.key)
        mine = results.get((p.spec.id, p.spec.version), [])
        rows.append({"protocol": p.key, "title": p.spec.title, "frozen": entry is not None and entry.sha256 == p.sha256,
                     "results": len(mine), "conclusion": conclusion_at(mine, manifest["catalog_hash"])})
    lines = [f"{r['protocol']:<10} {'frozen' if r['frozen'] else 'unfrozen':<9} {r['title']}\n"
             f"{'':<10} {r['conclusion']}" for r in rows]
    out({"catalog_hash": manifest["catalog_hash"], "protocols": rows}, "\n".join(lines) or "no protocols", as_json)


@experiment_app.command("freeze")
def freeze_cmd(ctx: typer.Context, protocol: str = typer.Argument(..., help="Protocol id, e.g. E001 (or E001@2)."),
               directory: Path = DirOpt, as_json: bool = JsonOpt) -> None:
    """Write the protocol's SHA-256 and canonical copy to protocols.lock (a frozen version never changes)."""
    from ..experiments import freeze_protocol

    result = freeze_protocol(_workspace(ctx, directory), protocol, _units(ctx))
    verb = "already frozen" if result.already_frozen else "frozen"
    out(result.to_dict(), f"{result.key} {verb}: sha256 {result.sha256} ({result.lock})", as_json)


@experiment_app.command("audit")
def audit_cmd(ctx: typer.Context, protocols: list[str] = typer.Argument(None, help="Protocol ids (default: all)."),
              directory: Path = DirOpt, as_json: bool = JsonOpt) -> None:
    """Smallest sample at which each falsifier can pass at all; flags gates that cannot at the planned size."""
    from ..experiments import audit

    ws = _workspace(ctx, directory)
    units = _units(ctx)
    chosen = [ws.load(p, units) for p in protocols] if protocols else ws.load_all(units)
    result = audit(chosen)
    lines = [f"{'protocol':<10} {'gate':<6} {'metric':<36} {'rule':<30} {'min n':>7} {'planned':>8}  verdict"]
    for g in result.gates:
        need = "never" if g.min_samples is None else str(g.min_samples)
        verdict = "ok" if g.can_pass else "CANNOT PASS"
        lines.append(f"{g.protocol:<10} {g.gate:<6} {g.metric:<36} {g.rule:<30} {need:>7} {g.planned:>8}  "
                     f"{verdict}" + ("" if g.can_pass else f" ({g.note})"))
    lines.append(f"{len(result.flagged)} gate(s) cannot pass at the planned sample size")
    out(result.to_dict(), "\n".join(lines), as_json)
    if result.flagged:
        raise typer.Exit(1)


@experiment_app.command("run")
def run_cmd(ctx: typer.Context, protocol: str = typer.Argument(..., help="Protocol id, e.g. E001."),
            stage: str = typer.Option("virtual", "--stage", help="virtual (the datacenter replay) or real "
                                      "(needs --observations)."),
            replications: int = replications_option(None, "Replications per arm (default: the protocol's "
                                                                "planned sample size)."),
            seed: int = seed_option(None, "Seed (default: the protocol's seed policy)."),
            workers: int = WorkersOpt, scheduler: str = SchedulerOpt,
            observations: Path = typer.Option(None, "--observations", help="Measured observations (stage real): "
                                              "one file per real-validation requirement, <id>.<ext>."),
            directory: Path = DirOpt, as_json: bool = JsonOpt) -> None:
    """Run a frozen protocol's panel; write experiments/results/<id>/<run_id>.json."""
    from ..experiments import run_protocol

    ws = _workspace(ctx, directory)
    started = time.monotonic()
    with chunked(f"{protocol} panel", workers, scheduler) as (client, tick):
        result = run_protocol(protocol, workspace=ws, engine_factory=lambda: engine(ctx), stage=stage,
                              replications=replications, seed=seed, client=client, observations=observations,
                              progress=tick)
    a = result.artifact
    lines = [f"{a.protocol.id} v{a.protocol.version} {a.stage}: {a.conclusion}"]
    for m in a.metrics:
        if m.status == "resolved":
            lines.append(f"  {m.name:<42} {m.point:.4g} [{_n(m.lower)}, {_n(m.upper)}] {m.unit}  (n={m.samples})")
        else:
            need = f": needs {', '.join(m.missing_capabilities)}" if m.missing_capabilities else ""
            lines.append(f"  {m.name:<42} {m.status}{need}")
    for f in a.falsifiers:
        lines.append(f"  {f.id:<6} {f.status:<10} {f.metric}: {f.reason}")
    lines += [f"  reason: {r}" for r in a.conclusion_reasons]
    lines.append(f"{'reused' if result.reused else 'wrote'} {result.path} (sha256 {a.artifact_sha256[:16]})")
    err(f"wall time {time.monotonic() - started:.1f} s")
    out({**result.artifact.to_dict(), "path": result.path, "reused": result.reused}, "\n".join(lines), as_json)


def _n(x):
    return "-" if x is None else f"{x:.4g}"


@experiment_app.command("log")
def log_cmd(ctx: typer.Context, check_only: bool = typer.Option(False, "--check", help="Exit 1 if the log is stale."),
            target: Path = typer.Option(None, "--out", help="Log file (default: docs/results-log.md beside the "
                                        "experiments folder)."),
            directory: Path = DirOpt, as_json: bool = JsonOpt) -> None:
    """Regenerate docs/results-log.md from the artifacts."""
    from ..experiments import log

    ws = _workspace(ctx, directory)
    path = target if target is not None else ws.directory.resolve().parent / "docs" / "results-log.md"
    if check_only:
        is_stale = log.stale(ws, path)
        out({"stale": is_stale, "log": str(path)}, f"stale: {path}" if is_stale else f"{path} is up to date", as_json)
        if is_stale:
            raise typer.Exit(1)
        return
    changed = log.write(ws, path)
    n = len(log.artifacts(ws))
    out({"written": changed, "log": str(path), "artifacts": n},
        f"{'wrote' if changed else 'unchanged'} {path} ({n} artifact(s))", as_json)
