"""PNG plots for the terminal commands: an estimate's step-time waterfall and cost breakdown, and a sweep's
valid layouts (objective against memory per GPU, the best marked). Matplotlib's Agg backend with fixed
metadata (no date or software version in the file): the same result gives the same bytes."""

from __future__ import annotations

import textwrap
from pathlib import Path

from gpustack_compiler.base.atomic import write_atomic

from .breakdown import Breakdown
from .sweep import SweepResult

METADATA = {"Software": None}


def _figure(height: float):
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    return Figure(figsize=(9, height), dpi=100)


def _errors(parts, starts) -> tuple[list[float], list[list[float]]]:
    """Centres and (below, above) lengths of each part's p5-p95 band, drawn at the end of its bar."""
    xs, err = [], [[], []]
    for p, s in zip(parts, starts):
        lo, hi = p.interval.get(5) if p.interval else None, p.interval.get(95) if p.interval else None
        xs.append(s + p.value)
        err[0].append(max(p.value - lo, 0) if lo is not None else 0)
        err[1].append(max(hi - p.value, 0) if hi is not None else 0)
    return xs, err


def estimate_png(step: Breakdown, cost: Breakdown, path: str | Path) -> None:
    """Two panels: the step time as a waterfall of its parts then the total; the cost per token as one
    stacked bar of its parts, what is not counted listed beneath. Lines: p5 to p95."""
    fig = _figure(9)
    top, bottom = fig.subplots(2, 1, gridspec_kw={"height_ratios": [3, 2]})
    if step.parts:
        starts, acc = [], 0.0
        for p in step.parts:
            starts.append(acc)
            acc += p.value
        labels = [p.label for p in step.parts] + ["total"]
        ys = list(range(len(labels)))[::-1]
        top.barh(ys[:-1], [p.value for p in step.parts], left=starts, color="#4c78a8")
        top.barh(ys[-1], step.value, color="#54a24b")
        xs, err = _errors(step.parts, starts)
        top.errorbar(xs, ys[:-1], xerr=err, fmt="none", ecolor="black", capsize=3)
        if step.interval:
            top.errorbar([step.value], [ys[-1]], xerr=[[step.value - step.interval[5]], [step.interval[95] - step.value]],
                         fmt="none", ecolor="black", capsize=3)
        top.set_yticks(ys, labels)
        top.set_xlabel(f"{step.figure} ({step.units})")
        top.set_title(f"{step.figure}: {step.value:.4g} {step.units}")
    else:
        top.text(0.5, 0.5, f"{step.figure}: {step.reason}", ha="center", va="center", wrap=True)
        top.set_axis_off()
    if cost.parts:
        left = 0.0
        colors = ["#4c78a8", "#f58518", "#e45756", "#72b7b2", "#54a24b", "#eeca3b", "#b279a2"]
        for i, p in enumerate(cost.parts):
            bottom.barh(0, p.value, left=left, color=colors[i % len(colors)], label=f"{p.label}: {p.value:.3g}")
            left += p.value
        if cost.interval:
            bottom.errorbar([cost.value], [0], xerr=[[cost.value - cost.interval[5]], [cost.interval[95] - cost.value]],
                            fmt="none", ecolor="black", capsize=4)
        bottom.set_yticks([])
        bottom.set_xlabel(f"{cost.figure} ({cost.units})")
        missing = textwrap.fill("not counted: " + "; ".join(cost.leaves_out.values()), 120) if cost.leaves_out else ""
        bottom.set_title(f"{cost.figure}: {cost.value:.4g} {cost.units}\n{missing}".strip(), fontsize=8)
        bottom.legend(loc="upper center", bbox_to_anchor=(0.5, -0.35), ncol=2, fontsize=8)
    else:
        bottom.text(0.5, 0.5, f"{cost.figure}: {cost.reason}"[:200], ha="center", va="center", wrap=True)
        bottom.set_axis_off()
    fig.tight_layout()
    write_atomic(Path(path), lambda tmp: fig.savefig(tmp, format="png", metadata=METADATA), make_dirs=False)


def sweep_png(result: SweepResult, axes: list[str], path: str | Path) -> None:
    """Every valid layout as a point, objective against memory per GPU; the best one marked."""
    fig = _figure(5.5)
    ax = fig.subplots()
    rows = result.top
    ax.scatter([r["memory_per_gpu_GB"] for r in rows], [r[result.objective] for r in rows], s=18, color="#4c78a8",
               label=f"valid layouts ({result.valid})")
    if rows:
        best = rows[0]
        ax.scatter([best["memory_per_gpu_GB"]], [best[result.objective]], s=160, marker="*", color="#e45756",
                   label="best: " + ", ".join(f"{a}={best[a]}" for a in axes), zorder=3)
    ax.set_xlabel("memory per GPU (GB)")
    ax.set_ylabel(f"{result.objective} ({result.units})")
    ax.set_title(f"{result.evaluated} layouts, {result.valid} valid; best by {result.objective}")
    ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    write_atomic(Path(path), lambda tmp: fig.savefig(tmp, format="png", metadata=METADATA), make_dirs=False)



def learning_png(conditions: list, title: str, path: str | Path, top: float = 3.5) -> None:
    """Held-out loss against tokens and against FLOPs, one line per condition (`MeasuredCondition`s: the mean
    over seeds, the seeds' range shaded); evaluation conditions dashed, inadmissible ones grey. The loss axis
    stops at `top`, where the differences between conditions are (every curve starts near ln 256 = 5.5 and a
    corruption spike goes far higher). The title says what the curves are calibrated on: a local small model,
    not a frontier-scale run."""
    import matplotlib
    import numpy as np

    fig = _figure(7)
    by_tokens, by_flops = fig.subplots(1, 2, sharey=True)
    cmap = matplotlib.colormaps["tab20"]
    lowest = top
    for i, cond in enumerate(conditions):
        n = min(len(c.series["loss"]) for c in cond.curves)
        loss = np.array([c.series["loss"][:n] for c in cond.curves])
        lowest = min(lowest, float(np.nanmin(loss)))
        color = "0.6" if cond.inadmissible else cmap((2 * i) % 20 + (i // 10) % 2)  # ten hues, then their tints
        style = "--" if cond.split == "evaluation" else "-"
        label = (cond.condition + (" (held out)" if cond.split == "evaluation" else "")
                 + (" (inadmissible)" if cond.inadmissible else ""))
        for ax, name in ((by_tokens, "tokens"), (by_flops, "flops")):
            x = np.array(cond.curves[0].series[name][:n])
            ax.plot(x, loss.mean(0), style, color=color, lw=1.2, label=label if ax is by_tokens else None)
            ax.fill_between(x, loss.min(0), loss.max(0), color=color, alpha=0.12, lw=0)
    for ax, what in ((by_tokens, "tokens processed by all replicas (wasted work included)"),
                     (by_flops, "training FLOPs (6N + attention + head per token)")):
        ax.set_xlabel(what, fontsize=8)
        ax.grid(alpha=0.3)
    by_tokens.set_ylim(lowest - 0.05, top)
    by_tokens.set_ylabel(f"held-out loss (nat/token; axis cut at {top:g}, curves start near 5.5)", fontsize=8)
    fig.legend(loc="lower center", ncol=4, fontsize=7, frameon=False)
    fig.suptitle(textwrap.fill(title, 130), fontsize=8)
    fig.tight_layout(rect=(0, 0.17, 1, 1))
    write_atomic(Path(path), lambda tmp: fig.savefig(tmp, format="png", metadata=METADATA), make_dirs=False)
