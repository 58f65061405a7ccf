"""`gpustack learn CONFIG.yaml`: the local learning workload (gpustack_sim/learning/README.md)."""

from __future__ import annotations

import os
from pathlib import Path

import typer

from gpustack_compiler.base.errors import InfrastructureError, InputError

from .app import JsonOpt, app, err, out


@app.command("learn")
def learn_cmd(config: Path = typer.Argument(..., help="Learning config (schemas/learn.schema.json)."),
              out_dir: Path = typer.Option(Path("data"), "--out", help="Write OUT/learning/*.json (curves) and "
                                           "OUT/observations/PANEL.yaml here."),
              plot: Path = typer.Option(None, "--plot", help="Also draw the learning curves to this PNG."),
              replot: bool = typer.Option(False, "--replot", help="Train nothing: plot the measurements this "
                                          "config already wrote under --out (needs --plot)."),
              as_json: bool = JsonOpt) -> None:
    """Train a small language model on this machine's CPUs under every condition and seed of CONFIG; write
    each seed's loss curve and one observation per condition."""
    from ..learning.config import load_config
    from ..learning.curves import load_measured

    if replot and plot is None:
        raise InputError("--replot draws a plot: give --plot PNG")
    if plot is not None and not plot.parent.is_dir():
        raise InputError(f"--plot: no such folder {plot.parent}")
    cfg, _ = load_config(config)
    obs_path = out_dir / "observations" / f"{cfg.panel}.yaml"
    if not replot:
        try:
            from ..learning.workload import measure, write
        except ModuleNotFoundError as exc:
            if exc.name not in ("jax", "jaxlib", "optax"):
                raise
            raise InfrastructureError(f"the learning workload needs {exc.name}, which is not installed: "
                                      'python3 -m pip install -e ".[learn]"') from None

        def progress(cond, seed, run):
            err(f"{cond} seed {seed}: loss {run.initial_loss:.3f} -> {run.final_loss:.3f} nat/token over "
                f"{run.points[-1]['tokens']:,} tokens in {run.seconds[-1]:.1f} s")

        m = measure(config, progress if not as_json else None)
        write(m, out_dir)
        err(f"trained {sum(len(r) for r in m.runs.values())} runs in {m.seconds:.0f} s (wallclock, XLA compilation "
            f"included; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs)")
    measured = load_measured(obs_path)
    if plot is not None:
        from ..analyses.plots import learning_png

        n = measured[0].curves[0].params_non_embedding
        learning_png(measured, f"{cfg.panel}: held-out loss of a LOCAL SMALL MODEL ({n:,.0f} "
                     f"non-embedding parameters, byte-level, {cfg.model.layers} transformer block(s), CPU), mean "
                     f"and range of {len(cfg.seeds)} seeds. Calibration data for that model only: it does not claim to "
                     "transfer to frontier-scale training.", plot)
    rows = [{"id": m.id, "condition": m.condition, "split": m.split, "loss_final": m.value,
             "inadmissible": m.inadmissible} for m in measured]
    lines = [f"{r['id']:<44}{r['split']:<12}{r['loss_final']:>8.4f} nat/token"
             + (f"  INADMISSIBLE: {r['inadmissible']}" if r["inadmissible"] else "") for r in rows]
    lines.append(f"wrote {obs_path}" if not replot else f"read {obs_path}")
    if plot is not None:
        lines.append(f"wrote {plot}")
    out({"observations": str(obs_path), "rows": rows, "plot": str(plot) if plot else None}, "\n".join(lines),
        as_json)
