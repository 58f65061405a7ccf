"""`gpustack estimate` and `gpustack sweep`: commands that take a run file."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from gpustack_compiler.cli import JsonOpt, Neo4jOpt, app, out
from gpustack_compiler.errors import UsageError
from gpustack_compiler.suggest import did_you_mean

from .cmd_resolve import _trace_lines
from .display import fmt

if TYPE_CHECKING:
    from .estimate import Estimate

PresetOpt = typer.Option([], "--preset", help="Extra preset, applied after the run file's.")
AssignOpt = typer.Option([], "--assign", help="Extra assignment NAME=VALUE (with units).")
VariantOpt = typer.Option([], "--variant", help="Extra variant selection NAME=KEY.")
ModeOpt = typer.Option([], "--mode", help="Extra variant mode KEY.")


@app.command("estimate")
def estimate_cmd(ctx: typer.Context,
                 run_file: Path = typer.Argument(None, help="Run file (schemas/run.schema.json); without one, "
                                                 "the run comes from --set flags alone."),
                 set_: list[str] = typer.Option([], "--set", help="Override a run-file field: layout.tp=4, gpus=512."),
                 preset: list[str] = PresetOpt, assign: list[str] = AssignOpt, variant: list[str] = VariantOpt,
                 mode: list[str] = ModeOpt,
                 sample: list[str] = typer.Option([], "--sample", help="Extra uncertain root: NAME~normal(mu, sd) ..."),
                 samples: int = typer.Option(10000, "--samples", min=2, help="Monte Carlo samples."),
                 seed: int = typer.Option(0, "--seed", help="Random seed (same seed, same output)."),
                 trace: list[str] = typer.Option([], "--trace", help="Show what a figure is made of (label or name)."),
                 as_json: bool = JsonOpt, neo4j: bool = Neo4jOpt) -> None:
    """Step time, throughput, utilization, memory fit, energy and cost of a training run, with intervals."""
    from .engine import Engine
    from .estimate import estimate
    from .run import load_run

    run = load_run(run_file, set_).with_extras(preset, assign, variant, mode)
    engine = Engine(ctx, neo4j)
    est = estimate(engine.resolver, engine.scenarios, run, samples, seed, sample)
    data = est.as_dict()
    lines = estimate_lines(est)
    for name in trace:
        fig = next((f for f in est.figures if name in (f.label, f.target)), None)
        if fig is None:
            raise UsageError(f"--trace {name!r}: not a figure of the estimate",
                             did_you_mean(name, [f.target for f in est.figures] + [f.label for f in est.figures]))
        res = est.resolutions.get(fig.target)
        lines.append(f"trace of {fig.target}:")
        lines.extend(_trace_lines(res) if res else [f"  {fig.error}"])
        data.setdefault("traces", {})[fig.target] = [s.as_dict() for s in res.trace] if res else []
    out(data, "\n".join(lines), as_json)


def estimate_lines(est: Estimate) -> list[str]:
    lines = [f"estimate for {est.run}", f"  presets: {', '.join(est.presets)}; modes: {', '.join(est.modes)}"]
    width = max(len(f.label) for f in est.figures)
    for f in est.figures:
        if f.error:
            lines.append(f"  {f.label:<{width}}  not resolved: {f.error}")
        elif f.value is None and "per_gpu_without_buffers" in est.memory and f.target == "par.memory.per_gpu":
            lines.append(f"  {f.label:<{width}}  {fmt(est.memory['per_gpu_without_buffers'], None, f.units)} "
                         "before runtime buffers (see memory below)")
        elif f.value is None:
            lines.append(f"  {f.label:<{width}}  not resolved: {len(f.missing)} missing root(s)")
        else:
            shown = fmt(f.value, None, f.units)
            band = (f"   [p5 {f.interval[5]:.4g}, p50 {f.interval[50]:.4g}, p95 {f.interval[95]:.4g}]"
                    if f.interval else "")
            lines.append(f"  {f.label:<{width}}  {shown}{band}")
    mem = est.memory
    if mem["status"] != "unknown":
        parts = ", ".join(f"{k.rsplit('.', 1)[-1]} {v['value']:.4g} {v['units']}" for k, v in mem["breakdown"].items()
                          if v["value"] is not None)
        units, cap = mem["per_gpu_units"], f"{mem['capacity']:.4g} {mem['capacity_units']}"
        if "per_gpu" in mem:
            lines.append(f"memory: {mem['per_gpu']:.4g} {units} per GPU of {cap}: "
                         f"{mem['status'] if mem['status'] == 'fits' else mem['status'].upper()}"
                         + (f" ({parts})" if parts else ""))
        else:
            lines.append(f"memory: {mem['per_gpu_without_buffers']:.4g} {units} per GPU before runtime buffers, "
                         f"of {cap}: {mem['status']} ({mem['headroom_for_buffers']:.4g} {units})"
                         + (f"; {parts}" if parts else ""))
    boundaries: dict[tuple[str, str], list[str]] = {}
    for f in est.figures:
        for choice, what in f.leaves_out.items():
            boundaries.setdefault((choice, what), []).append(f.label)
    if boundaries:
        lines.append("not counted (definitions chosen by the presets that leave something out):")
        lines.extend(f"  {what} [{choice}]: in {', '.join(labels)}" for (choice, what), labels in sorted(boundaries.items()))
    missing: dict[str, set] = {}
    for f in est.figures:
        for name, meta in f.missing.items():
            missing.setdefault(f"{meta.get('family')} ({meta.get('category')})", set()).add(name)
    if missing:
        lines.append("missing roots by family:")
        lines.extend(f"  {fam}: {', '.join(sorted(names))}" for fam, names in sorted(missing.items()))
    if est.uncertain:
        lines.append(f"intervals: {est.samples} samples, seed {est.seed}, over "
                     + "; ".join(f"{k} ~ {v}" for k, v in est.uncertain.items()))
    else:
        lines.append("intervals: none (no uncertain inputs; calibrate, or pass --sample)")
    return lines


@app.command("sweep")
def sweep_cmd(ctx: typer.Context, run_file: Path = typer.Argument(..., help="Run file; the grid replaces its layout."),
              grid: list[str] = typer.Option([], "--grid", help="AXIS=V1,V2,... (tp, pp, dp, cp, micro_batch, "
                                             "interleave, zero_stage, recompute, sequence_parallel)."),
              objective: str = typer.Option("tokens_per_sec", "--objective",
                                            help="tokens_per_sec, cost_per_token, energy_per_token or step_time."),
              top: int = typer.Option(10, "--top", min=1, help="Valid layouts to show."),
              set_: list[str] = typer.Option([], "--set", help="Override a run-file field."),
              preset: list[str] = PresetOpt, assign: list[str] = AssignOpt, variant: list[str] = VariantOpt,
              mode: list[str] = ModeOpt,
              as_json: bool = JsonOpt) -> None:
    """Evaluate every layout on a grid; rank the valid ones, count the invalid ones by reason."""
    from .engine import Engine
    from .run import load_run
    from .sweep import AXES, parse_grid, sweep

    if not grid:
        raise UsageError("--grid is required, e.g. --grid tp=1,2,4,8 --grid pp=1,2,4,8")
    run = load_run(run_file, set_).with_extras(preset, assign, variant, mode)
    engine = Engine(ctx, False)
    result = sweep(engine.resolver, engine.scenarios, run, parse_grid(grid), objective, top)
    lines = [f"{result.evaluated} layouts evaluated in {result.seconds:.2f} s: {result.valid} valid"]
    lines += [f"  note: {n}" for n in result.notes]
    for reason, count in sorted(result.rejected.items(), key=lambda kv: -kv[1]):
        lines.append(f"  rejected {count:>8}  {reason}")
    if result.top:
        cols = list(AXES)
        lines.append("  " + " ".join(f"{c:>10}" for c in cols) + f"  {objective:>16}  mem/GPU GB")
        for row in result.top:
            lines.append("  " + " ".join(f"{row[c]!s:>10}" for c in cols)
                         + f"  {row[objective]:>16.6g}  {row['memory_per_gpu_GB']:>9.1f}")
    out(result.as_dict(), "\n".join(lines), as_json)
