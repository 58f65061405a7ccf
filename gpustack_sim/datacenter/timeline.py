"""PNG timeline of the first logged replication: progress, failures and grid or cooling signals, then each
site's node power by phase. Same log, same bytes: the Agg backend with fixed metadata (no date or
software version stamped into the file)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .events import NS_PER_S
from .simulation import PHASES

if TYPE_CHECKING:
    from .results import SimulationResult

SECONDS_PER_DAY = 86400
COLORS = {"compute": "tab:blue", "communication": "tab:orange", "checkpoint": "tab:green", "idle": "tab:gray",
          "recovery": "tab:red"}


def draw_timeline(result: SimulationResult, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    rows = [r for r in result.log if r["replication"] == 0]
    resolution = result.default_resolution_s()
    series = [result.power_series(site, resolution) for site in result.sites]
    series = [s for s in series if any(v.any() for v in s.node_s.values())]
    fig = Figure(figsize=(9, 3 + 2 * len(series)), dpi=100)
    axes = fig.subplots(1 + len(series), 1, sharex=True, squeeze=False)[:, 0]
    days = lambda ns: ns / NS_PER_S / SECONDS_PER_DAY  # noqa: E731
    progress = axes[0]
    xs, ys = [0.0], [0]
    for row in rows:
        if row["kind"] == "compute":
            xs += [days(row["time_ns"]), days(row["time_ns"] + row["duration_ns"])]
            ys += [row["position"], row["position"] + row["count"]]
        elif row["kind"] == "failure":
            progress.axvline(days(row["time_ns"]), color="tab:red", lw=0.4, alpha=0.6)
        elif row["kind"] in ("grid_signal", "cooling_signal") and row["cause"] == "start":
            progress.axvspan(days(row["time_ns"]), days(row["time_ns"] + row["duration_ns"]), color="tab:purple",
                             alpha=0.15, lw=0)
    progress.plot(xs, ys, lw=0.8)
    progress.set_ylabel("step position")
    progress.set_title("progress (line), failures (red), grid and cooling signals (purple)")
    for ax, s in zip(axes[1:], series):
        x = (s.start_s + s.width_s / 2) / SECONDS_PER_DAY
        shown = [ph for ph in PHASES if ph not in s.undefined]
        ax.stackplot(x, [s.power_w[ph] / 1e3 for ph in shown], labels=shown,
                     colors=[COLORS[ph] for ph in shown], lw=0)
        for ph in s.undefined:
            ran = np.isnan(s.power_w[ph])
            if ran.any():
                ax.fill_between(x, 0, 1, where=ran, transform=ax.get_xaxis_transform(), color="none",
                                hatch="///", edgecolor=COLORS[ph], lw=0, label=f"{ph} (no catalog power)")
        ax.set_ylabel(f"{s.site}: node kW")
        ax.legend(loc="upper right", fontsize="small", ncol=len(PHASES))
    axes[-1].set_xlabel(f"days (power: mean over {resolution:g} s bins)")
    fig.savefig(path, format="png", metadata={"Software": None})
