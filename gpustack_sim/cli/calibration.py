"""`gpustack calibrate` and `gpustack validate`: fitting to the calibration data, scoring elsewhere."""

from __future__ import annotations

from pathlib import Path

import typer

from gpustack_compiler.manifest import write_text

from .app import JsonOpt, app, engine, out, settings


@app.command("calibrate")
def calibrate_cmd(ctx: typer.Context,
                  data: Path = typer.Option(..., "--data", envvar="GPUSTACK_CALIBRATION_DATA",
                                            help="Calibration data folder (training_iterations.csv, "
                                            "hardware.yaml), e.g. ../shared/data/calibration."),
                  out_path: Path = typer.Option(None, "--out", help="Preset file to write "
                                                "(default catalog/presets/calibration.yaml)."),
                  as_json: bool = JsonOpt) -> None:
    """Fit the parameters needing calibration to the calibration data and write the calibration preset."""
    cal = engine(ctx).calibrate(data)
    target = out_path or settings(ctx).catalog / "presets" / "calibration.yaml"
    write_text(cal.preset_text, target)
    table, stats, digest = cal.rows, cal.stats, cal.data_sha256
    data_out = {"preset": str(target), **cal.to_dict()}
    lines = [f"{'row':>3}  {'run':<28}{'measured s':>12}{'predicted s':>13}{'error':>9}"]
    lines += [f"{t['row']:>3}  {t['run']:<28}{t['measured']:>12.4g}{t['predicted']:>13.4g}{100 * t['error']:>8.1f}%"
              for t in table]
    lines.append(f"in-sample: MAPE {100 * stats['mape']:.1f}%, max |error| {100 * stats['max_abs_error']:.1f}%, "
                 f"signed bias {100 * stats['bias']:+.1f}%")
    lines += [f"fitted {k} = {p['value']:.4f} " + (f"± {p['sd']:.4f}" if p["sd"] is not None
                                                   else "(at its bound: not identified by the data)")
              for k, p in cal.parameters.items()]
    lines.append(f"wrote {target} (data sha256 {digest[:12]})")
    out(data_out, "\n".join(lines), as_json)


@app.command("validate")
def validate_cmd(ctx: typer.Context, runs_csv: Path = typer.Argument(..., help="CSV: calibration columns plus "
                                                                       "seconds_per_iteration or tflops_per_gpu."),
                 samples: int = typer.Option(2000, "--samples", min=2, help="Monte Carlo samples per row."),
                 seed: int = typer.Option(0, "--seed"),
                 as_json: bool = JsonOpt) -> None:
    """Predict measured runs with the calibrated model and score the predictions."""
    result = engine(ctx).validate(runs_csv, samples, seed)
    table, stats, coverage = result.rows, result.stats, result.interval_coverage
    lines = [f"{'row':>3}  {'run':<28}{'measured':>11}{'predicted':>11}{'error':>8}  p5..p95"]
    for t in table:
        band = f"{t['p5']:.4g}..{t['p95']:.4g}" if t["p5"] is not None else "-"
        lines.append(f"{t['row']:>3}  {t['run']:<28}{t['measured']:>11.4g}{t['predicted']:>11.4g}"
                     f"{100 * t['error']:>7.1f}%  {band}")
    lines.append(f"MAPE {100 * stats['mape']:.1f}%, max |error| {100 * stats['max_abs_error']:.1f}%, bias "
                 f"{100 * stats['bias']:+.1f}%, Spearman {result.spearman:.3f}, interval coverage "
                 + (f"{100 * coverage:.0f}%" if coverage is not None else "n/a"))
    out(result.to_dict(), "\n".join(lines), as_json)
