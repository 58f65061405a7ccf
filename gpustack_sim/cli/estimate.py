"""`gpustack estimate`: a training or serving run's figures with intervals, and what each is made of."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from gpustack_compiler.base.errors import InputError
from gpustack_compiler.base.suggest import did_you_mean

from .app import EXIT_FINDINGS, AllowViolationsOpt, JsonOpt, Neo4jOpt, app, engine, err, out, pairs, seed_option
from .render import fmt, trace_lines
from .workers import SchedulerOpt, WorkersOpt, chunked

if TYPE_CHECKING:
    from ..analyses.estimate import Estimate
    from ..engine.run import RunSpec
    from ..engine.serve_run import ServeRunSpec

PresetOpt = typer.Option([], "--preset", help="Extra preset, applied after the run file's.")
AssignOpt = typer.Option([], "--assign", help="Extra assignment NAME=VALUE (with units).")
VariantOpt = typer.Option([], "--variant", help="Extra variant selection NAME=KEY.")
ModeOpt = typer.Option([], "--mode", help="Extra variant mode KEY.")


@app.command("estimate")
def estimate_cmd(ctx: typer.Context,
                 run_file: Path = typer.Argument(None, help="Run file (schemas/run.schema.json, or "
                                                 "schemas/serve_run.schema.json with `kind: serving`); without one, "
                                                 "the run comes from --set flags alone."),
                 set_: list[str] = typer.Option([], "--set", help="Override a run-file field: layout.tp=4, gpus=512."),
                 preset: list[str] = PresetOpt, assign: list[str] = AssignOpt, variant: list[str] = VariantOpt,
                 mode: list[str] = ModeOpt,
                 sample: list[str] = typer.Option([], "--sample",
                                                  help="Extra uncertain root: NAME~normal(mean, sd) ..."),
                 samples: int = typer.Option(10000, "--samples", min=2, help="Monte Carlo samples."),
                 seed: int = seed_option(),
                 trace: list[str] = typer.Option([], "--trace", help="Show what a figure is made of (label or name)."),
                 plot: Path = typer.Option(None, "--plot", help="Write a PNG: the step-time waterfall and the "
                                           "cost-per-token breakdown, with intervals."),
                 workers: int = WorkersOpt, scheduler: str = SchedulerOpt,
                 allow_violations: bool = AllowViolationsOpt,
                 strict: bool = typer.Option(False, "--strict", help="Exit 1 on a warning too (a layout that "
                                             "does not fit in memory, a violated constraint)."),
                 model_form: bool = typer.Option(False, "--model-form", help="Also give the model-form term: "
                                                 "the evaluation panels' errors in this run's stratum, widening "
                                                 "outside their territory (runs `validate`: tens of seconds)."),
                 as_json: bool = JsonOpt, neo4j: bool = Neo4jOpt) -> None:
    """Step time, throughput, utilization, memory fit, energy and cost of a training run, or TTFT, TPOT,
    largest batch, tokens/s per GPU, energy and cost per million tokens of a serving run, with intervals.
    Exit 1 when a required figure does not resolve (what is missing is listed), on a finding (a quantity
    outside its declared range, such as a job larger than its cluster), or with --strict on a warning."""
    from ..engine.serve_run import ServeRunSpec

    run = run_with_extras(run_file, set_, preset, assign, variant, mode)
    if plot is not None and isinstance(run, ServeRunSpec):
        raise InputError("--plot draws a training run's step-time and cost breakdowns; a serving run has none",
                         "use --trace LABEL to see what a serving figure is made of")
    eng = engine(ctx, neo4j, allow_violations)
    with chunked("samples", workers, scheduler) as (client, _):
        est = eng.estimate(run, samples, seed, sample, client)
    data = est.to_dict()
    lines = estimate_lines(est)
    if model_form:
        data["model_form"] = eng.model_form(run)
        lines += model_form_lines(est, data["model_form"], eng.facts.required_figures)
    if plot is not None:
        from ..analyses.breakdown import breakdown
        from ..analyses.plots import estimate_png

        drawn = eng.facts.breakdowns
        estimate_png(breakdown(eng, run, est, drawn.step.variable, sub_split=drawn.step.split, sample=sample),
                     breakdown(eng, run, est, drawn.cost.variable, sub_split=drawn.cost.split, sample=sample), plot)
        lines.append(f"wrote {plot}")
    for name in trace:
        fig = next((f for f in est.figures if name in (f.label, f.target)), None)
        if fig is None:
            raise InputError(f"--trace {name!r}: not a figure of the estimate",
                             did_you_mean(name, [f.target for f in est.figures] + [f.label for f in est.figures]))
        res = est.resolutions.get(fig.target)
        lines.append(f"trace of {fig.target}:")
        lines.extend(trace_lines(res) if res else [f"  {fig.error}"])
        data.setdefault("traces", {})[fig.target] = [s.to_dict() for s in res.trace] if res else []
    out(data, "\n".join(lines), as_json)
    for warning in est.warnings:
        err(f"warning: {warning}")
    for finding in est.findings:
        err(f"finding: {finding}")
    if est.unresolved:
        err(f"Error: {', '.join(est.unresolved)} not resolved (see the missing roots above; supply them with "
            "presets or --assign)")
        raise typer.Exit(EXIT_FINDINGS)
    if est.findings or (strict and est.warnings):
        raise typer.Exit(EXIT_FINDINGS)


def run_with_extras(run_file: Path | None, set_: list[str], preset: list[str], assign: list[str],
                    variant: list[str], mode: list[str]) -> RunSpec | ServeRunSpec:
    """The run file with `--set` overrides, then the extra presets, assignments, variants and modes."""
    from ..engine.run_file import load_run

    return load_run(run_file, set_).with_extras(preset, pairs(assign, "--assign"), pairs(variant, "--variant"), mode)


def model_form_lines(est: Estimate, mf: dict, required) -> list[str]:
    """The model-form term, and the 90% bands of the figures an estimate requires (step time, throughput)."""
    from ..analyses.model_form import combine

    stratum = "/".join(mf["stratum"].values())
    lines = [f"model-form term ({stratum}; from {mf['rows']} evaluation rows' errors, docs/evaluation.md):"]
    for level, t in mf["terms"].items():
        width = "abstains" if t["half_width"] is None else f"x/ {math.exp(t['half_width']):.3g}"
        lines.append(f"  {level}: {width}: {t['reason']}")
    t90 = mf["terms"].get("90%")
    if t90 and t90["half_width"] is not None:
        for f in est.figures:
            if f.target in required and f.value and f.interval:
                lo, hi = combine(f.value, (f.interval[5], f.interval[95]), t90["half_width"])
                lines.append(f"  {f.label} with it: [p5 {lo:.4g}, p95 {hi:.4g}] {f.units}")
    return lines


def estimate_lines(est: Estimate) -> list[str]:
    lines = [f"estimate for {est.run}", f"  presets: {', '.join(est.presets)}; modes: {', '.join(est.modes)}",
             *(f"  {note}" for note in est.notes)]
    width = max(len(f.label) for f in est.figures)
    for f in est.figures:
        if f.error:
            lines.append(f"  {f.label:<{width}}  not resolved: {f.error}")
        elif f.value is None and "per_gpu_without_buffers" in est.memory and f.target == est.memory_target:
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
    violated = sorted({item for f in est.figures for item in f.violated.items()})
    if violated:
        # Which figures rest on each is in the --json output (figures[].violated).
        lines.append("VIOLATED (constraints and validity conditions; the figures that rest on them do not hold):")
        lines.extend(f"  {name}: {detail}" for name, detail in violated)
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
