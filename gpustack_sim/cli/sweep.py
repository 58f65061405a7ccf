"""`gpustack sweep`: every layout on a grid, ranked by an objective."""

from __future__ import annotations

from pathlib import Path

import typer

from gpustack_compiler.errors import InputError

from .app import AllowViolationsOpt, JsonOpt, Neo4jOpt, app, engine, out
from .estimate import AssignOpt, ModeOpt, PresetOpt, VariantOpt, run_with_extras


@app.command("sweep")
def sweep_cmd(ctx: typer.Context, run_file: Path = typer.Argument(..., help="Run file; the grid replaces its layout."),
              grid: list[str] = typer.Option([], "--grid", help="AXIS=V1,V2,... with an axis of "
                                             "catalog/bindings/run_fields.yaml (tp, pp, micro_batch, recompute, ...)."),
              objective: str = typer.Option("tokens_per_sec", "--objective",
                                            help="An objective of catalog/bindings/figures.yaml "
                                            "(tokens_per_sec, cost_per_token, ...)."),
              top: int = typer.Option(10, "--top", min=1, help="Valid layouts to show."),
              set_: list[str] = typer.Option([], "--set", help="Override a run-file field."),
              plot: Path = typer.Option(None, "--plot", help="Write a PNG of every valid layout: the objective "
                                        "against memory per GPU, the best marked."),
              preset: list[str] = PresetOpt, assign: list[str] = AssignOpt, variant: list[str] = VariantOpt,
              mode: list[str] = ModeOpt,
              allow_violations: bool = AllowViolationsOpt, as_json: bool = JsonOpt,
              neo4j: bool = Neo4jOpt) -> None:
    """Evaluate every layout on a grid; rank the valid ones, count the invalid ones by reason."""
    from ..analyses.sweep import parse_grid

    if not grid:
        raise InputError("--grid is required, e.g. --grid tp=1,2,4,8 --grid pp=1,2,4,8")
    run = run_with_extras(run_file, set_, preset, assign, variant, mode)
    eng = engine(ctx, neo4j, allow_violations)
    # A plot shows every valid layout; the text still lists the best --top.
    result = eng.sweep(run, parse_grid(grid), objective, top if plot is None else 10**9)
    lines = [f"{result.evaluated} layouts evaluated in {result.seconds:.2f} s: {result.valid} valid"]
    lines += [f"  note: {n}" for n in result.notes]
    for reason, count in sorted(result.rejected.items(), key=lambda kv: -kv[1]):
        lines.append(f"  rejected {count:>8}  {reason}")
    if result.top:
        cols = list(eng.facts.run_fields.axes)
        lines.append("  " + " ".join(f"{c:>10}" for c in cols) + f"  {objective:>16}  mem/GPU GB")
        for row in result.top[:top]:
            lines.append("  " + " ".join(f"{row[c]!s:>10}" for c in cols)
                         + f"  {row[objective]:>16.6g}  {row['memory_per_gpu_GB']:>9.1f}")
    if plot is not None:
        from ..analyses.plots import sweep_png

        sweep_png(result, list(eng.facts.run_fields.axes), plot)
        lines.append(f"wrote {plot}")
    data = result.to_dict()
    data["top"] = data["top"][:top]
    out(data, "\n".join(lines), as_json)
