"""`gpustack calibrate` and `gpustack validate`: fitting to calibration data, scoring on evaluation data."""

from __future__ import annotations

from pathlib import Path

import typer

from gpustack_compiler.base.atomic import write_text

from .app import AllowViolationsOpt, JsonOpt, app, engine, out, pairs, seed_option, settings


@app.command("calibrate")
def calibrate_cmd(ctx: typer.Context,
                  sources: list[Path] = typer.Argument(None, help="Calibration observation files or folders "
                                                       "(default: the calibration observations in data/observations)."),
                  data: Path = typer.Option(None, "--data", envvar="GPUSTACK_CALIBRATION_DATA",
                                            help="Or a calibration data folder (training_iterations.csv, "
                                            "hardware.yaml), e.g. ../shared/data/calibration."),
                  out_path: Path = typer.Option(None, "--out", help="Preset file to write "
                                                "(default catalog/presets/calibration.yaml; with --components, "
                                                "the folder for one calibration_<generation>.yaml per generation)."),
                  components: bool = typer.Option(False, "--components", help="Fit kernel and memory efficiencies "
                                                  "per hardware generation to component benchmarks instead."),
                  learning: bool = typer.Option(False, "--learning", help="Fit the learning roots to the local "
                                                "learning workload's measurements instead (calibration split)."),
                  as_json: bool = JsonOpt) -> None:
    """Fit the parameters needing calibration to calibration data and write the calibration preset."""
    if data is not None and sources:
        raise typer.BadParameter("give observation files or --data, not both")
    if (components or learning) and data is not None:
        raise typer.BadParameter("--components and --learning fit observation files, not a --data folder")
    if components and learning:
        raise typer.BadParameter("--components and --learning are separate fits: give one")
    if learning:
        cal = engine(ctx).calibrate_learning(list(sources or []))
        cals, targets = [cal], [out_path or settings(ctx).catalog / "presets" / f"{cal.preset}.yaml"]
    elif components:
        cals = engine(ctx).calibrate_components(list(sources or []))
        folder = out_path or settings(ctx).catalog / "presets"
        targets = [folder / f"{c.preset}.yaml" for c in cals]
    else:
        cals = [engine(ctx).calibrate(data if data is not None else list(sources or []))]
        targets = [out_path or settings(ctx).catalog / "presets" / "calibration.yaml"]
    for cal, target in zip(cals, targets):
        write_text(target, cal.preset_text)
    lines = []
    for cal, target in zip(cals, targets):
        lines += _report(cal, target)
    data_out = [{"preset": str(t), **c.to_dict()} for c, t in zip(cals, targets)]
    out(data_out if components else data_out[0], "\n".join(lines), as_json)


def _report(cal, target: Path) -> list[str]:
    stats, digest = cal.stats, cal.data_sha256
    lines = [f"preset {cal.preset}:", f"{'id':<46}{'measured':>11}{'predicted':>11}{'error':>9}"]
    lines += [f"{t['id']:<46}{t['measured']:>11.4g}{t['predicted']:>11.4g}{100 * t['error']:>8.1f}%"
              + ("" if t["within_uncertainty"] else "  outside its uncertainty") for t in cal.rows]
    lines.append(f"in-sample: MAPE {100 * stats['mape']:.1f}%, max |error| {100 * stats['max_abs_error']:.1f}%, "
                 f"signed bias {100 * stats['bias']:+.1f}%")
    lines += [f"fitted {k} = {p['value']:.4g} " + (
        f"± {p['sd']:.2g} (exactly determined; the spread of the other {p['spread_from']} rows)"
        if p["spread_from"] else f"± {p['sd']:.2g}" if p["sd"] is not None
        else "(exactly determined by its own measurements)" if p["exactly_determined"]
        else "(at its bound: not identified by the data)")
              for k, p in cal.parameters.items()]
    if cal.skipped:
        lines.append(f"skipped {len(cal.skipped)} superseded observation(s): " + ", ".join(cal.skipped[:5])
                     + (" ..." if len(cal.skipped) > 5 else ""))
    lines.append(f"wrote {target} (data sha256 {digest[:12]}"
                 + (f", {len(cal.observations)} observation ids)" if cal.observations else ")"))
    return lines


def _pct(value) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _num(value) -> str:
    return "-" if value is None else f"{value:.3f}"


@app.command("validate")
def validate_cmd(ctx: typer.Context,
                 sources: list[Path] = typer.Argument(None, help="Evaluation observation files or folders, or CSV "
                                                      "files in the calibration columns (default: the evaluation "
                                                      "observations in data/observations)."),
                 preset: list[str] = typer.Option([], "--preset", help="Preset applied to every row after its own."),
                 assign: list[str] = typer.Option([], "--assign", help="NAME=VALUE for every row, e.g. "
                                                  "link.inter.cable_length='100 m'."),
                 samples: int = typer.Option(None, "--samples", min=2, help="Monte Carlo samples per row "
                                             "(default 2000; 200 with --learning, where each draw integrates the "
                                             "loss trajectory)."),
                 seed: int = seed_option(),
                 plot: Path = typer.Option(None, "--plot", help="Write predicted against measured, with "
                                           "intervals, to this PNG file."),
                 learning: bool = typer.Option(False, "--learning", help="Score the learning calibration on "
                                               "held-out local learning conditions instead."),
                 sealed: bool = typer.Option(False, "--sealed", help="Score the sealed set (data/sealed) alone, "
                                             "once, when its issue resolves; refused while its seal is broken."),
                 allow_violations: bool = AllowViolationsOpt, as_json: bool = JsonOpt) -> None:
    """Predict held-out measurements with the calibrated model and score them per panel."""
    if learning:
        if preset or assign or sealed:
            raise typer.BadParameter("--learning scores the learning calibration alone: no --preset, --assign or "
                                     "--sealed")
        result = engine(ctx).validate_learning(list(sources or []), samples=samples or 200, seed=seed)
    else:
        result = engine(ctx, allow_violations=allow_violations).validate(list(sources or []), presets=preset,
                                      assign=pairs(assign, "--assign", "NAME=VALUE, e.g. gpu.power.total='0.5 kW'"),
                                      samples=samples or 2000, seed=seed, sealed=sealed)
    if plot is not None:
        from ..analyses.validate import plot as plot_validation

        plot_validation(result, plot)
    lines = ["the learning model, calibrated on a local small model (calibration_learning): no frontier-scale "
             "claim"] if learning else []
    for name, panel in result.panels.items():
        mine = [t for t in result.rows if t["panel"] == name]
        lines.append(f"panel {name}: {panel['n']} scored, {panel['unresolved']} unresolved")
        if mine:
            lines.append(f"  {'id':<42}{'measured':>10}{'predicted':>11}{'error':>8}  p5..p95")
        for t in mine:
            band = f"{t['p5']:.4g}..{t['p95']:.4g}" if t["p5"] is not None else "-"
            lines.append(f"  {t['id']:<42}{t['measured']:>10.4g}{t['predicted']:>11.4g}{100 * t['error']:>7.1f}%  "
                         f"{band} {t['units']}" + ("  (outside the calibrated territory)"
                                                   if t.get("outside_territory") else ""))
        if panel["n"]:
            cov = ", ".join(f"{level} {c['covered']}/{c['n']}" for level, c in panel["coverage"].items()) or "n/a"
            mf = ", ".join(f"{level} {c['covered']}/{c['n']}" + (f" ({c['abstained']} abstained)" if c["abstained"]
                                                                  else "")
                           for level, c in panel.get("coverage_model_form", {}).items())
            lines.append(f"  MAPE {_pct(panel['mape'])}, max |error| {_pct(panel['max_abs_error'])}, bias "
                         f"{100 * panel['bias']:+.1f}%, Spearman {_num(panel['spearman'])}, Kendall tau-b "
                         f"{_num(panel['kendall_tau_b'])}, interval coverage {cov}"
                         + (f"; with the model-form term (estimated without this panel) {mf}" if mf else ""))
            terms = {t["model_form"]["90%"]["reason"] for t in mine if "model_form" in t}
            lines += [f"  model-form term at 90%: {reason}" for reason in sorted(terms)]
            for d in panel["decisions"]:
                lines.append(f"  decision {d['group']}: " + (f"regret {_pct(d['regret'])} (chose {d['chosen']}, best "
                                                            f"{d['best']})" if d["regret"] is not None
                                                            else f"not scored ({d['reason']})"))
    if result.superseded:
        lines.append(f"skipped {len(result.superseded)} superseded observation(s): "
                     + ", ".join(f"{s['id']} (by {s['superseded_by']})" for s in result.superseded[:5])
                     + (" ..." if len(result.superseded) > 5 else ""))
    if result.unresolved:
        lines.append(f"{len(result.unresolved)} row(s) do not resolve:")
        lines += [f"  {u['id']} ({u['where']}): {u['reason']}" for u in result.unresolved]
    if result.overall:
        o = result.overall
        lines.append(f"all {o['n']} scored rows: MAPE {_pct(o['mape'])}, max |error| {_pct(o['max_abs_error'])}, "
                     f"bias {100 * o['bias']:+.1f}% (coverage and ranking are per panel only)")
    out(result.to_dict(), "\n".join(lines), as_json)
