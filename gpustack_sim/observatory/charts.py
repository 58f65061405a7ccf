"""The observatory's charts as Vega-Lite specifications made with Altair. Each carries a description (the
chart's text alternative, which Vega puts on the SVG as its ARIA label) and explicit parameter names, so
the same data always give the same specification."""

from __future__ import annotations

import altair as alt

WIDTH = 640


def _spec(chart: alt.TopLevelMixin) -> dict:
    return chart.to_dict(validate=True)


def _band(row: dict) -> dict:
    return {"p5": row.get("p5"), "p95": row.get("p95")}


def waterfall(bd: dict) -> dict:
    """The step time as a waterfall: each part a bar from where the previous ones end, then the total; each
    with its p5-p95 interval as a line."""
    rows, start = [], 0.0
    for i, p in enumerate(bd["parts"]):
        end = start + p["value"]
        lo, hi = _band(p)["p5"], _band(p)["p95"]
        rows.append({"order": i, "part": p["label"], "variable": p["variable"] or "", "start": start, "end": end,
                     "value": p["value"], "lo": start + lo if lo is not None else None,
                     "hi": start + hi if hi is not None else None, "kind": "part"})
        start = end
    rows.append({"order": len(rows), "part": f"total ({bd['figure']})", "variable": bd["target"], "start": 0.0,
                 "end": bd["value"], "value": bd["value"], "lo": bd.get("p5"), "hi": bd.get("p95"), "kind": "total"})
    units = bd["units"]
    base = alt.Chart(alt.Data(values=rows)).encode(
        y=alt.Y("part:N", sort=alt.EncodingSortField("order"), title=None))
    bars = base.mark_bar().encode(
        x=alt.X("start:Q", title=f"{bd['figure']} ({units})"), x2="end:Q",
        color=alt.Color("kind:N", scale=alt.Scale(domain=["part", "total"], range=["#4c78a8", "#54a24b"]), legend=None),
        tooltip=[alt.Tooltip("part:N"), alt.Tooltip("variable:N"), alt.Tooltip("value:Q", format=".4g", title=units),
                 alt.Tooltip("lo:Q", format=".4g", title="p5 (from start)"),
                 alt.Tooltip("hi:Q", format=".4g", title="p95 (from start)")])
    band = base.mark_rule(color="black", strokeWidth=2).encode(x="lo:Q", x2="hi:Q")
    parts = ", ".join(f"{p['label']} {p['value']:.4g} {units}" for p in bd["parts"])
    desc = (f"Waterfall of {bd['figure']}: {parts}; total {bd['value']:.4g} {units}. "
            "Black lines: p5 to p95 of each part.")
    return _spec((bars + band).properties(width=WIDTH, height=28 * len(rows), description=desc,
                                         title=f"{bd['figure']}: what one step is made of"))


def cost_bar(bd: dict, groups: dict[str, str]) -> dict:
    """The cost per token as one stacked bar, its parts by group (`groups`: part variable -> group, the rest
    `other`); what the estimate does not count is named in the legend with no value (there is none to draw)."""
    rows = []
    for i, p in enumerate(bd["parts"]):
        group = groups.get(p["parent"] or p["variable"] or "", "other")
        rows.append({"order": i, "part": f"{group}: {p['label']}", "value": p["value"], "p5": p.get("p5"),
                     "p95": p.get("p95"), "variable": p["variable"] or "", "bar": bd["figure"]})
    for i, (choice, what) in enumerate(sorted(bd["leaves_out"].items())):
        rows.append({"order": 100 + i, "part": f"not counted: {what[:60]}", "value": 0.0, "p5": None, "p95": None,
                     "variable": choice, "bar": bd["figure"]})
    units = bd["units"]
    bars = alt.Chart(alt.Data(values=rows)).mark_bar().encode(
        x=alt.X("value:Q", stack="zero", title=f"{bd['figure']} ({units})"),
        y=alt.Y("bar:N", title=None),
        color=alt.Color("part:N", sort=alt.EncodingSortField("order"), legend=alt.Legend(orient="bottom", columns=1,
                                                                                          labelLimit=600)),
        order=alt.Order("order:Q"),
        tooltip=[alt.Tooltip("part:N"), alt.Tooltip("variable:N"), alt.Tooltip("value:Q", format=".4g", title=units),
                 alt.Tooltip("p5:Q", format=".4g"), alt.Tooltip("p95:Q", format=".4g")])
    total = alt.Chart(alt.Data(values=[{"bar": bd["figure"], "p5": bd.get("p5"), "p95": bd.get("p95")}])).mark_rule(
        color="black", strokeWidth=2).encode(x="p5:Q", x2="p95:Q", y="bar:N")
    parts = ", ".join(f"{r['part']} {r['value']:.3g} {units}" for r in rows if r["order"] < 100)
    missing = "; ".join(bd["leaves_out"].values()) or "nothing"
    desc = (f"Stacked bar of {bd['figure']} ({bd['value']:.4g} {units}): {parts}. Black line: p5 to p95 of the "
            f"total. Not counted: {missing}.")
    return _spec((bars + total).properties(width=WIDTH, height=60, description=desc,
                                           title=f"{bd['figure']}: capital by part, energy, and what is not counted"))


def cone_graph() -> dict:
    """The template of the explorer's cone graph: nodes and edges arrive from the page (named data sets
    `nodes` and `edges`) for whichever variable is searched; the layout is layered by distance."""
    edges = alt.Chart(alt.NamedData("edges")).mark_rule(color="#bbb", strokeWidth=1).encode(
        x=alt.X("x:Q", axis=None), y=alt.Y("y:Q", axis=None), x2="x2:Q", y2="y2:Q")
    nodes = alt.Chart(alt.NamedData("nodes")).mark_point(filled=True, cursor="pointer").encode(
        x="x:Q", y="y:Q",
        color=alt.Color("system:N", legend=alt.Legend(title="system", orient="bottom", columns=6)),
        shape=alt.Shape("kind:N", scale=alt.Scale(domain=["target", "defined", "root", "constant"],
                                                  range=["diamond", "circle", "square", "triangle-up"]),
                        legend=alt.Legend(title="node", orient="bottom")),
        size=alt.value(140),
        href="href:N",
        tooltip=[alt.Tooltip("name:N"), alt.Tooltip("units:N"), alt.Tooltip("value:N", title="value in run"),
                 alt.Tooltip("depth:Q", title="relations away")])
    labels = alt.Chart(alt.NamedData("nodes")).mark_text(align="left", dx=8, fontSize=10).encode(
        x="x:Q", y="y:Q", text="short:N")
    return _spec((edges + nodes + labels).properties(
        width=WIDTH + 200, height=420, description="Upstream cone of the selected variable: the selected "
        "variable on the right, what it is made of to the left, one column per relation crossed.")
        .configure_view(stroke=None))


def progress(sim: dict) -> dict:
    line = alt.Chart(alt.Data(values=sim["progress"])).mark_line().encode(
        x=alt.X("day:Q", title="days"), y=alt.Y("position:Q", title="steps kept (position)"),
        tooltip=[alt.Tooltip("day:Q", format=".3f"), alt.Tooltip("position:Q")])
    fails = alt.Chart(alt.Data(values=sim["failures"])).mark_rule(strokeDash=[3, 2]).encode(
        x="day:Q", color=alt.Color("cause:N", title="failure cause"),
        tooltip=[alt.Tooltip("day:Q", format=".3f"), alt.Tooltip("cause:N")])
    desc = (f"Progress of replication 0 over {sim['progress'][-1]['day']:.2f} days to step position "
            f"{sim['progress'][-1]['position']}, with {len(sim['failures'])} failures marked as dashed lines.")
    return _spec((line + fails).properties(width=WIDTH, height=220, description=desc,
                                           title="progress (line) and failures (dashed, by cause)"))


def failures_by_cause(result: dict) -> dict:
    rows = [{"cause": c, **s} for c, s in sorted(result["interruptions_by_cause"].items())]
    base = alt.Chart(alt.Data(values=rows)).encode(y=alt.Y("cause:N", title=None))
    bars = base.mark_bar().encode(x=alt.X("mean:Q", title="interruptions per run (mean over replications)"),
                                  tooltip=["cause:N", alt.Tooltip("mean:Q", format=".3g"),
                                           alt.Tooltip("p5:Q", format=".3g"), alt.Tooltip("p95:Q", format=".3g")])
    band = base.mark_rule(color="black", strokeWidth=2).encode(x="p5:Q", x2="p95:Q")
    desc = "Interruptions by cause: " + ", ".join(f"{r['cause']} mean {r['mean']:.3g} [p5 {r['p5']:.3g}, p95 "
                                                   f"{r['p95']:.3g}]" for r in rows)
    return _spec((bars + band).properties(width=WIDTH, height=max(40, 30 * len(rows)), description=desc,
                                          title="failures by cause (p5 to p95 over replications)"))


def power(sim: dict) -> dict:
    chart = alt.Chart(alt.Data(values=sim["power"])).mark_area().encode(
        x=alt.X("day:Q", title="days"), y=alt.Y("kw:Q", stack="zero", title="node IT power (kW)"),
        color=alt.Color("phase:N", sort=["compute", "communication", "checkpoint", "idle", "recovery"]),
        row=alt.Row("site:N", title=None),
        tooltip=[alt.Tooltip("day:Q", format=".3f"), "site:N", "phase:N", alt.Tooltip("kw:Q", format=".4g")])
    peak = max((r["kw"] for r in sim["power"]), default=0.0)
    desc = f"Node IT power by phase over time, stacked, per site; largest phase value {peak:.4g} kW."
    return _spec(chart.properties(width=WIDTH, height=160, description=desc, title="power by phase"))


def metrics(result: dict, falsifiers: list[dict]) -> dict | None:
    """An experiment run's metrics with their intervals, and each falsifier's threshold as a tick."""
    rows = [{"metric": m["name"], "point": m["point"], "lower": m["lower"], "upper": m["upper"], "unit": m["unit"]}
            for m in result["metrics"] if m["point"] is not None]
    if not rows:
        return None
    shown = {r["metric"] for r in rows}
    ticks = [{"metric": f["metric"], "threshold": f["threshold"], "falsifier": f["id"]} for f in falsifiers
             if f["metric"] in shown]
    base = alt.Chart(alt.Data(values=rows)).encode(y=alt.Y("metric:N", title=None))
    band = base.mark_rule(strokeWidth=2).encode(x=alt.X("lower:Q", title="value (metric's unit)",
                                                        scale=alt.Scale(zero=False)), x2="upper:Q")
    point = base.mark_point(filled=True, size=80).encode(
        x="point:Q", tooltip=["metric:N", alt.Tooltip("point:Q", format=".4g"), alt.Tooltip("lower:Q", format=".4g"),
                              alt.Tooltip("upper:Q", format=".4g"), "unit:N"])
    layers = [band, point]
    if ticks:
        layers.append(alt.Chart(alt.Data(values=ticks)).mark_tick(color="#e45756", thickness=2, size=24).encode(
            x="threshold:Q", y="metric:N", tooltip=["falsifier:N", "threshold:Q"]))
    desc = "Metrics with intervals: " + "; ".join(
        f"{r['metric']} {r['point']:.4g} [{r['lower'] if r['lower'] is None else format(r['lower'], '.4g')}, "
        f"{r['upper'] if r['upper'] is None else format(r['upper'], '.4g')}]" for r in rows)
    return _spec(alt.layer(*layers).properties(width=WIDTH, height=34 * len(rows), description=desc,
                                               title="metrics: point and interval; red ticks: falsifier thresholds"))
