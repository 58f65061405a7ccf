"""PNG timeline of one replication: progress, failures and node power. Same log, same bytes: the Agg
backend with fixed metadata (no date or software version stamped into the file)."""

from __future__ import annotations

from .events import NS_PER_S
from .parameters import JobParameters

SECONDS_PER_DAY = 86400


def draw_timeline(rows: list[dict], params: JobParameters, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9, 5), dpi=100)
    progress, power = fig.subplots(2, 1, sharex=True)
    days = lambda ns: ns / NS_PER_S / SECONDS_PER_DAY  # noqa: E731
    xs, ys, px, py = [0.0], [0], [], []
    for row in rows:
        if row["kind"] == "compute":
            start, end = days(row["time_ns"]), days(row["time_ns"] + row["duration_ns"])
            xs += [start, end]
            ys += [row["position"], row["position"] + row["count"]]
            px += [start, end]
            watts = row["nodes"] * (params.node_power_compute_w or 0)
            py += [watts, watts]
        elif row["kind"] == "recovery":
            start = days(row["time_ns"] - row["duration_ns"])
            idle = row["nodes"] * (params.node_power_idle_w or 0)
            px += [start, days(row["time_ns"])]
            py += [idle, idle]
    progress.plot(xs, ys, lw=0.8)
    for row in rows:
        if row["kind"] == "failure":
            progress.axvline(days(row["time_ns"]), color="tab:red", lw=0.4, alpha=0.6)
    progress.set_ylabel("step position")
    progress.set_title("progress (line) and failures (red)")
    power.plot(px, [w / 1e3 for w in py], lw=0.8, color="tab:orange")
    power.set_ylabel("node power, kW (idle unknown: 0)" if params.node_power_idle_w is None else "node power, kW")
    power.set_xlabel("days")
    fig.savefig(path, format="png", metadata={"Software": None})
