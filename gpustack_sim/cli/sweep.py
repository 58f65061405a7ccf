"""`gpustack sweep`: every layout on a grid, ranked by an objective."""

from __future__ import annotations

from pathlib import Path

import typer

from gpustack_compiler.base.errors import InputError

from .app import AllowViolationsOpt, JsonOpt, Neo4jOpt, app, engine, err, out
from .estimate import AssignOpt, ModeOpt, PresetOpt, VariantOpt, run_with_extras
from .workers import SchedulerOpt, WorkersOpt, chunked


@app.command("sweep")
def sweep_cmd(ctx: typer.Context, run_file: Path = typer.Argument(..., help="Run file; the grid replaces its layout."),
              grid: list[str] = typer.Option([], "--grid", help="AXIS=V1,V2,... with an axis of "
                                             "catalog/bindings/run_fields.yaml (tp, pp, micro_batch, recompute, ...), "
                                             "or of serve_fields.yaml for a serving run (tp, pp, ep, replicas, "
                                             "chunk_tokens)."),
              objective: str = typer.Option(None, "--objective",
                                            help="An objective of catalog/bindings/figures.yaml "
                                            "(tokens_per_sec (default), cost_per_token, ...), or of serve_figures.yaml "
                                            "for a serving run (cost_per_output_token (default), ...)."),
              top: int = typer.Option(10, "--top", min=1, help="Valid layouts to show."),
              set_: list[str] = typer.Option([], "--set", help="Override a run-file field."),
              plot: Path = typer.Option(None, "--plot", help="Write a PNG of every valid layout: the objective "
                                        "against memory per GPU, the best marked."),
              preset: list[str] = PresetOpt, assign: list[str] = AssignOpt, variant: list[str] = VariantOpt,
              mode: list[str] = ModeOpt, workers: int = WorkersOpt, scheduler: str = SchedulerOpt,
              allow_violations: bool = AllowViolationsOpt,
              as_json: bool = JsonOpt, neo4j: bool = Neo4jOpt) -> None:
    """Evaluate every layout on a grid (training or serving); rank the valid ones, count the invalid ones by reason."""
    from ..analyses.sweep import parse_grid

    if not grid:
        raise InputError("--grid is required, e.g. --grid tp=1,2,4,8 --grid pp=1,2,4,8")
    from ..engine.serve_run import ServeRunSpec

    run = run_with_extras(run_file, set_, preset, assign, variant, mode)
    serving = isinstance(run, ServeRunSpec)
    if serving and plot is not None:
        raise InputError("--plot draws a training sweep (objective against memory per GPU); not for a serving run")
    eng = engine(ctx, neo4j, allow_violations)
    # A plot shows every valid layout; the text still lists the best --top.
    with chunked("layouts", workers, scheduler) as (client, tick):
        result = eng.sweep(run, parse_grid(grid), objective, top if plot is None else 10**9, client, tick)
    err(f"swept {result.evaluated} layouts in {result.seconds:.2f} s")
    lines = [f"{result.evaluated} layouts evaluated: {result.valid} valid"]
    lines += [f"  note: {n}" for n in result.notes]
    for reason, count in sorted(result.rejected.items(), key=lambda kv: -kv[1]):
        lines.append(f"  rejected {count:>8}  {reason}")
    if result.top:
        cols = list((eng.facts.serving.fields if serving else eng.facts.run_fields).axes)
        extra, width = ("gpus", 5) if serving else ("memory_per_gpu_GB", 9)
        lines.append("  " + " ".join(f"{c:>10}" for c in cols) + f"  {result.objective:>16}  "
                     + ("GPUs" if serving else "mem/GPU GB"))
        for row in result.top[:top]:
            lines.append("  " + " ".join(f"{row[c]!s:>10}" for c in cols)
                         + f"  {row[result.objective]:>16.6g}  {row[extra]:>{width}.{0 if serving else 1}f}")
    if plot is not None:
        from ..analyses.plots import sweep_png

        sweep_png(result, list(eng.facts.run_fields.axes), plot)
        lines.append(f"wrote {plot}")
    data = result.to_dict()
    data["top"] = data["top"][:top]
    out(data, "\n".join(lines), as_json)
