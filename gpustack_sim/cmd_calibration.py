"""`gpustack calibrate` and `gpustack validate`: fitting to the calibration data, scoring elsewhere."""

from __future__ import annotations

from pathlib import Path

import typer

from gpustack_compiler.cli import JsonOpt, app, out, settings
from gpustack_compiler.errors import UsageError



def _calibration_dir(ctx: typer.Context, data: Path | None) -> Path:
    if data is not None:
        return data
    return settings(ctx).catalog.resolve().parent.parent / "shared" / "data" / "calibration"


@app.command("calibrate")
def calibrate_cmd(ctx: typer.Context,
                  data: Path = typer.Option(None, "--data", envvar="GPUSTACK_CALIBRATION_DATA",
                                            help="Calibration folder (default ../shared/data/calibration)."),
                  out_path: Path = typer.Option(None, "--out", help="Preset file to write "
                                                "(default catalog/presets/calibration.yaml)."),
                  as_json: bool = JsonOpt) -> None:
    """Fit the parameters needing calibration to the calibration data and write the calibration preset."""
    from .calibrate import FIXED, PARAMETERS, RowModels, data_hash, errors, fit, read_rows
    from .engine import Engine

    folder = _calibration_dir(ctx, data)
    csv_path, hw_path = folder / "training_iterations.csv", folder / "hardware.yaml"
    for p in (csv_path, hw_path):
        if not p.is_file():
            raise UsageError(f"calibration data {p} not found", "pass --data DIR")
    engine = Engine(ctx, False)
    rows = read_rows(csv_path, [])
    result = fit(RowModels(engine.resolver, engine.scenarios, rows))
    measured = [r.measured for r in rows]
    stats = errors(result.predicted, measured)
    target = out_path or settings(ctx).catalog / "presets" / "calibration.yaml"
    digest = data_hash([csv_path, hw_path])
    text = calibration_yaml(result, stats, digest, len(rows), [csv_path.name, hw_path.name], PARAMETERS, FIXED)
    target.write_text(text, encoding="utf-8")
    table = [{"row": r.index, "run": r.label, "measured": m, "predicted": p, "error": (p - m) / m}
             for r, m, p in zip(rows, measured, result.predicted)]
    data_out = {"preset": str(target), "parameters": {k: {"value": v, "sd": result.sds[k]}
                                                      for k, v in result.values.items()},
                "rows": table, **stats, "data_sha256": digest, "iterations": result.iterations}
    lines = [f"{'row':>3}  {'run':<28}{'measured s':>12}{'predicted s':>13}{'error':>9}"]
    lines += [f"{t['row']:>3}  {t['run']:<28}{t['measured']:>12.4g}{t['predicted']:>13.4g}{100 * t['error']:>8.1f}%"
              for t in table]
    lines.append(f"in-sample: MAPE {100 * stats['mape']:.1f}%, max |error| {100 * stats['max_abs_error']:.1f}%, "
                 f"signed bias {100 * stats['bias']:+.1f}%")
    lines += [f"fitted {k} = {v:.4f} " + (f"± {result.sds[k]:.4f}" if result.sds[k] is not None
                                            else "(at its bound: not identified by the data)")
              for k, v in result.values.items()]
    lines.append(f"wrote {target} (data sha256 {digest[:12]})")
    out(data_out, "\n".join(lines), as_json)


def calibration_yaml(result, stats: dict, digest: str, n_rows: int, files: list[str], params, fixed) -> str:
    """The calibration preset, written by hand so the file is stable byte for byte."""
    lines = ["# yaml-language-server: $schema=../../schemas/presets.schema.json",
             "# Written by `gpustack calibrate`; do not edit by hand. Fitted only to the calibration data folder.",
             "presets:", "  - name: calibration",
             "    description: >-",
             "      Efficiency parameters fitted to the calibration data: measured seconds per iteration of",
             "      four GPT-style models on A100 (Korthikanti et al. 2022, Table 5), by damped Gauss-Newton",
             "      on log(predicted / measured). Roots in one group share one fitted value.",
             "    provenance: fitted",
             "    source: gpustack calibrate on shared/data/calibration (training_iterations.csv, hardware.yaml)",
             "    references: [korthikanti2022_recompute]",
             "    fit:",
             "      method: Levenberg-Marquardt on log residuals; sd from the residual variance and the Jacobian",
             f"      data: [{', '.join(files)}]",
             f"      data_sha256: {digest}",
             f"      rows: {n_rows}",
             f"      mape: {stats['mape']:.6g}",
             f"      max_abs_error: {stats['max_abs_error']:.6g}",
             f"      bias: {stats['bias']:.6g}",
             "    assignments:"]
    for p in params:
        for root in p.roots:
            sd = result.sds[p.key]
            spread = f", sd: {sd:.3g}" if sd is not None else ""
            note = f"fitted, group {p.key}" + ("" if sd is not None else "; stopped at its bound, not identified")
            lines.append(f"      {root}: {{value: {result.values[p.key]:.6g}{spread}, "
                         f"reference: korthikanti2022_recompute, note: \"{note}\"}}")
    for f in fixed:
        lines.append(f"      {f.root}: {{value: {f.value:g}, units: \"{f.units}\", reference: korthikanti2022_recompute, "
                     f"note: \"held fixed in the fit: {f.reason}\"}}")
    return "\n".join(lines) + "\n"


@app.command("validate")
def validate_cmd(ctx: typer.Context, runs_csv: Path = typer.Argument(..., help="CSV: calibration columns plus "
                                                                       "seconds_per_iteration or tflops_per_gpu."),
                 samples: int = typer.Option(2000, "--samples", min=2, help="Monte Carlo samples per row."),
                 seed: int = typer.Option(0, "--seed"),
                 as_json: bool = JsonOpt) -> None:
    """Predict measured runs with the calibrated model and score the predictions."""
    from .calibrate import errors, read_rows, spearman
    from .engine import Engine
    from .estimate import build_scenario, fitted_distributions, intervals
    from .resolver import ResolveError

    engine = Engine(ctx, False)
    rows = read_rows(runs_csv, ["calibration"])
    table = []
    for row in rows:
        scenario = build_scenario(engine.scenarios, row.run)
        try:
            res = engine.resolver.resolve(row.target, scenario)
        except ResolveError as exc:
            raise UsageError(f"{runs_csv}:{row.line} (row {row.index}): {exc.message}", exc.hint) from None
        if res.value is None:
            raise UsageError(f"{runs_csv}:{row.line} (row {row.index}): {row.target} still needs "
                             f"{', '.join(sorted(res.missing))}")
        dists = fitted_distributions(scenario)
        band = intervals(engine.resolver, scenario, [row.target], dists, samples, seed).get(row.target) \
            if dists else None
        table.append({"row": row.index, "run": row.label, "target": row.target, "units": res.units,
                      "measured": row.measured, "predicted": res.value,
                      "error": (res.value - row.measured) / row.measured,
                      "p5": band[5] if band else None, "p95": band[95] if band else None})
    measured, predicted = [t["measured"] for t in table], [t["predicted"] for t in table]
    stats = errors(predicted, measured)
    covered = [t for t in table if t["p5"] is not None]
    coverage = (sum(t["p5"] <= t["measured"] <= t["p95"] for t in covered) / len(covered)) if covered else None
    summary = {**stats, "spearman": spearman(predicted, measured), "interval_coverage": coverage, "rows": table}
    lines = [f"{'row':>3}  {'run':<28}{'measured':>11}{'predicted':>11}{'error':>8}  p5..p95"]
    for t in table:
        band = f"{t['p5']:.4g}..{t['p95']:.4g}" if t["p5"] is not None else "-"
        lines.append(f"{t['row']:>3}  {t['run']:<28}{t['measured']:>11.4g}{t['predicted']:>11.4g}"
                     f"{100 * t['error']:>7.1f}%  {band}")
    lines.append(f"MAPE {100 * stats['mape']:.1f}%, max |error| {100 * stats['max_abs_error']:.1f}%, bias "
                 f"{100 * stats['bias']:+.1f}%, Spearman {summary['spearman']:.3f}, interval coverage "
                 + (f"{100 * coverage:.0f}%" if coverage is not None else "n/a"))
    out(summary, "\n".join(lines), as_json)
