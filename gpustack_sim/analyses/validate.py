"""Validation: predict held-out measurements with the calibrated model and score the predictions per panel
(error, bias, rank agreement, interval coverage, decision regret; `scoring.py`). It only predicts: nothing
here is fitted, calibration observations are refused, and so is any observation the active calibration
was fitted to.

Every row is attempted. A row the catalog cannot resolve yet is reported with its reason and the others
are still scored."""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gpustack_compiler.base.atomic import write_atomic
from gpustack_compiler.base.errors import InputError

from ..engine.facts import Facts
from ..engine.observation import in_force, load_observations, require_split, superseded_by
from ..engine.resolver import ResolveError, Resolver
from ..engine.scenario import ScenarioBuilder
from . import scoring
from .estimate import fitted_distributions, intervals
from .measured import Row, check_sources, observation_row, read_rows

# Central prediction intervals scored: confidence level -> the percentiles that bound it.
LEVELS = {0.5: (25, 75), 0.9: (5, 95)}
PERCENTILES = (5, 25, 50, 75, 95)


@dataclass
class Validation:
    sources: list[str]
    calibration: str | None
    rows: list[dict]  # scored rows
    unresolved: list[dict]  # rows the catalog cannot predict yet, each with its reason
    panels: dict[str, dict]
    overall: dict | None  # errors pooled over every scored row (coverage and ranking stay per panel)
    superseded: list[dict] = field(default_factory=list)  # observations given that a later one supersedes: skipped

    def to_dict(self) -> dict:
        return {"sources": self.sources, "calibration": self.calibration, "panels": self.panels,
                "overall": self.overall, "rows": self.rows, "unresolved": self.unresolved,
                "superseded": self.superseded}


def gather(scenarios: ScenarioBuilder, facts: Facts, sources: Sequence[Path], default_dir: Path | None,
           references: Collection[str]) -> tuple[list[Row], list[dict], list[dict]]:
    """Rows to predict from CSV files and observation files or folders (evaluation observations only);
    with no sources, every evaluation observation in `default_dir`. Observations of a variable the catalog
    does not have come back as unresolved entries instead of rows; superseded observations are skipped and
    come back as the third list."""
    csvs = [Path(p) for p in sources if Path(p).suffix.lower() == ".csv"]
    given = [Path(p) for p in sources if Path(p).suffix.lower() != ".csv"]
    rows: list[Row] = []
    for path in csvs:
        rows += read_rows(path, facts.measured_runs, set(scenarios.presets))
    if given:
        items = load_observations(given)
        require_split(items, "evaluation", "validate")
    elif not csvs:
        if default_dir is None or not default_dir.is_dir():
            raise InputError("no observations given and no data/observations folder found",
                             "pass observation files or folders, or a CSV")
        # Local learning conditions are scored by the learning model's own panel, not as training runs.
        items = [i for i in load_observations([default_dir]) if i.obs.split == "evaluation" and i.obs.learning is None]
    else:
        items = []
    successors = superseded_by(items)
    items, gone = in_force(items)
    skipped = [{"id": i.obs.id, "panel": i.obs.panel, "where": i.where, "superseded_by": successors[i.obs.id]}
               for i in gone]
    check_sources(items, references)
    unresolved = []
    known = scenarios.records(i.obs.measures.variable for i in items)
    for item in items:
        if item.obs.measures.variable not in known:
            # The catalog lacks what was measured: reported, not refused. Anything else wrong with the
            # observation (units, convention) is bad data and stops the command at its line.
            decision = item.obs.decision.group if item.obs.decision else None
            unresolved.append({"id": item.obs.id, "panel": item.obs.panel, "where": item.where,
                               "target": item.obs.measures.variable, "decision": decision,
                               "reason": f"the catalog has no variable `{item.obs.measures.variable}`"})
            continue
        rows.append(observation_row(item, scenarios, facts.measured_runs))
    return replicates_merged(rows), unresolved, skipped


def replicates_merged(rows: list[Row]) -> list[Row]:
    """Rows measuring the same variable on the same run within a panel are replicates: one row with the
    mean value and an uncertainty spanning them all, so a run measured twice does not weigh twice."""
    groups: dict[tuple, list[Row]] = {}
    for r in rows:
        groups.setdefault((r.panel, r.target, json.dumps(r.run.model_dump(mode="json"), sort_keys=True)),
                          []).append(r)
    out = []
    for members in groups.values():
        first = members[0]
        if len(members) == 1:
            out.append(first)
            continue
        agg = scoring.aggregate([m.measured for m in members], [m.low for m in members], [m.high for m in members])
        ids = tuple(i for m in members for i in m.ids)
        out.append(Row("+".join(ids), first.panel, first.where, first.label, first.run, first.target, agg.value,
                       agg.low, agg.high, first.decision, first.source, first.assumptions, ids))
    return out


def fitted_ids(scenarios: ScenarioBuilder, presets: Sequence[str]) -> set[str]:
    """Observation ids any fitted preset among `presets` was fitted to."""
    out: set[str] = set()
    for name in presets:
        fit = (scenarios.presets.get(name) or {}).get("fit") or {}
        out.update(fit.get("observations") or [])
    return out


def validate(resolver: Resolver, scenarios: ScenarioBuilder, facts: Facts, sources: Sequence[Path], *,
             presets: Sequence[str] = (), assign: Mapping[str, object] | None = None, samples: int = 2000,
             seed: int = 0, calibration: str | None = "calibration", default_dir: Path | None = None,
             references: Collection[str] = ()) -> Validation:
    extra = [*([calibration] if calibration else []), *presets]
    scenarios.build(extra, assign)  # the options apply to every row: a bad one is the user's, once
    rows, unresolved, skipped = gather(scenarios, facts, sources, default_dir, references)
    runs = {}
    for r in rows:
        mine = [*([calibration] if calibration else []), *presets]
        runs[r.id] = r.run.with_extras(presets=[p for p in mine if p not in r.run.presets_in_order()], assign=assign)
    leaked = sorted(i for r in rows for i in set(r.ids)
                    & fitted_ids(scenarios, facts.run_presets(runs[r.id], scenarios.presets)))
    if leaked:
        raise InputError(f"validate refuses {len(leaked)} observation(s) the active calibration was fitted to: "
                         f"{', '.join(leaked[:5])}" + (" ..." if len(leaked) > 5 else ""),
                         "data fitted into the model cannot grade it (docs/evaluation.md)")
    scored, table = [], []
    for row in rows:
        reason = None
        try:
            scenario = facts.fields_for(runs[row.id]).scenario(scenarios, runs[row.id])
            res = resolver.resolve(row.target, scenario)
        except (ResolveError, InputError) as exc:
            reason = str(exc)
        else:
            if res.value is None:
                reason = f"{row.target} still needs {', '.join(sorted(res.missing))}"
        if reason is not None:
            unresolved.append({"id": row.id, "panel": row.panel, "where": row.where, "target": row.target,
                               "decision": row.decision.group if row.decision else None, "reason": reason})
            continue
        dists = fitted_distributions(scenario)
        band = intervals(resolver, scenario, [row.target], dists, samples, seed, PERCENTILES).get(row.target) \
            if dists else None
        bounds = {level: (band[lo], band[hi]) for level, (lo, hi) in LEVELS.items()} if band else {}
        scored.append((row, scoring.Scored(row.panel, row.measured, res.value, bounds)))
        table.append({"id": row.id, "panel": row.panel, "where": row.where, "run": row.label, "target": row.target,
                      "units": res.units, "measured": row.measured, "measured_low": row.low,
                      "measured_high": row.high, "predicted": res.value,
                      "error": (res.value - row.measured) / row.measured,
                      **{f"p{p}": (band[p] if band else None) for p in (5, 25, 75, 95)},
                      "source": row.source, "assumed_fields": list(row.assumptions), "observations": list(row.ids)})
    unresolved.sort(key=lambda u: (u["panel"], u["id"]))
    names = sorted({r.panel for r, _ in scored} | {u["panel"] for u in unresolved})
    panels = {panel: _panel(panel, scored, unresolved) for panel in names}
    overall = None
    if scored:
        overall = {"n": len(scored), **scoring.errors([s.predicted for _, s in scored],
                                                      [s.measured for _, s in scored])}
    return Validation([str(s) for s in sources], calibration, table, unresolved, panels, overall, skipped)


def _panel(panel: str, scored: list[tuple[Row, scoring.Scored]], unresolved: list[dict]) -> dict:
    mine = [(r, s) for r, s in scored if r.panel == panel]
    out: dict = {"n": len(mine), "unresolved": sum(u["panel"] == panel for u in unresolved)}
    if not mine:
        return out
    predicted, measured = [s.predicted for _, s in mine], [s.measured for _, s in mine]
    targets = sorted({r.target for r, _ in mine})
    out.update({"targets": targets, **scoring.errors(predicted, measured)})
    # Ranks compare like with like: within a panel measuring one variable.
    same = len(targets) == 1
    out["spearman"] = scoring.spearman(predicted, measured) if same else None
    out["kendall_tau_b"] = scoring.kendall_tau_b(predicted, measured) if same else None
    cov = scoring.coverage([s for _, s in mine]).get(panel, {})
    out["coverage"] = {f"{round(100 * level)}%": c.to_dict() for level, c in cov.items()}
    out["decisions"] = _decisions(mine, [u for u in unresolved if u["panel"] == panel])
    return out


def _decisions(mine: list[tuple[Row, scoring.Scored]], unresolved: list[dict]) -> list[dict]:
    groups: dict[str, list[tuple[Row, scoring.Scored]]] = {}
    for r, s in mine:
        if r.decision is not None:
            groups.setdefault(r.decision.group, []).append((r, s))
    for u in unresolved:
        if u.get("decision"):
            groups.setdefault(u["decision"], [])
    out = []
    for group, members in sorted(groups.items()):
        better = {r.decision.better for r, _ in members}
        # A regret over some of the options could miss the best one: every option must be scored.
        unscored = [u["id"] for u in unresolved if u.get("decision") == group]
        reason = (f"options not scored: {', '.join(unscored)}" if unscored
                  else "fewer than two options" if len(members) < 2
                  else "options disagree on which end is better" if len(better) != 1 else None)
        if reason is not None:
            out.append({"group": group, "regret": None, "reason": reason})
            continue
        regret = scoring.decision_regret(group, {r.id: (s.measured, s.predicted) for r, s in members}, better.pop())
        out.append({**regret.to_dict(), "options": len(members)})
    return out


def plot(result: Validation, path: Path) -> None:
    """Predicted against measured, one panel per axes, with prediction intervals (90%) and measurement
    uncertainty as error bars; the identity line marks a perfect prediction. Same result, same bytes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [p for p in result.panels if result.panels[p]["n"]]
    if not panels:
        raise InputError("nothing to plot: no row was scored")
    cols = min(3, len(panels))
    rows = (len(panels) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 4.0 * rows), squeeze=False)
    for ax, panel in zip(axes.flat, panels):
        mine = [r for r in result.rows if r["panel"] == panel]
        x = [r["measured"] for r in mine]
        y = [r["predicted"] for r in mine]
        xerr = [[r["measured"] - r["measured_low"] for r in mine], [r["measured_high"] - r["measured"] for r in mine]]
        has_band = all(r["p5"] is not None for r in mine)
        yerr = [[r["predicted"] - r["p5"] for r in mine], [r["p95"] - r["predicted"] for r in mine]] if has_band \
            else None
        ax.errorbar(x, y, xerr=xerr, yerr=yerr, fmt="o", ms=4, capsize=2, lw=0.8)
        lo = min(min(x), min(y), *(r["p5"] for r in mine if r["p5"] is not None))
        hi = max(max(x), max(y), *(r["p95"] for r in mine if r["p95"] is not None))
        pad = 0.05 * (hi - lo or abs(hi) or 1.0)
        ax.plot([lo - pad, hi + pad], [lo - pad, hi + pad], color="0.5", lw=0.8, ls="--")
        units = mine[0]["units"]
        score = result.panels[panel]
        ax.set_title(f"{panel}\nn={score['n']}, MAPE {100 * score['mape']:.1f}%", fontsize=9)
        ax.set_xlabel(f"measured {mine[0]['target']} [{units}]", fontsize=8)
        ax.set_ylabel(f"predicted [{units}]", fontsize=8)
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    fig.tight_layout()
    # No software version or date in the file: the same result gives the same bytes.
    write_atomic(Path(path), lambda tmp: fig.savefig(tmp, format="png", dpi=100, metadata={"Software": None}),
                 make_dirs=False)
    plt.close(fig)


# ---- the learning model on held-out local learning conditions ---------------------------------------------

def learning_items(sources: Sequence[Path], default_dir: Path | None) -> list:
    """Evaluation observations of the local learning workload: those given, or every one in `default_dir`."""
    if sources:
        items = [i for i in load_observations(list(sources)) if i.obs.learning is not None]
        require_split(items, "evaluation", "validate --learning")
    else:
        if default_dir is None or not default_dir.is_dir():
            raise InputError("no observations given and no data/observations folder found",
                             "pass local learning observation files")
        items = [i for i in load_observations([default_dir])
                 if i.obs.learning is not None and i.obs.split == "evaluation"]
    if not items:
        raise InputError("no local learning evaluation observations", "run `gpustack learn` (docs/learning.md)")
    return items


def numeric_band(resolver: Resolver, target: str, scenario, samples: int, seed: int) -> dict[int, float] | None:
    """Percentiles of `target` with every assignment that carries a spread (a fitted root's sd) drawn from
    a normal distribution and the model resolved at each draw: the learning loss is an integral without a
    closed form in its roots, so it is sampled numerically. None when nothing carries a spread."""
    import numpy as np

    from ..engine.scenario import Assigned, Scenario

    spread = sorted(k for k, a in scenario.assignments.items() if a.sd)
    if not spread:
        return None
    rng = np.random.default_rng(seed)
    scale = resolver.variable(target).scale
    values = []
    for _ in range(samples):
        at = dict(scenario.assignments)
        for k in spread:
            a = at[k]
            at[k] = Assigned(float(rng.normal(a.value, a.sd)), a.origin, a.given)
        res = resolver.resolve(target, Scenario(at, dict(scenario.variants), list(scenario.presets)))
        if res.value is not None and np.isfinite(res.value):
            values.append(res.value)
    if not values:
        return None
    return {p: float(v) for p, v in zip(PERCENTILES, np.percentile(np.array(values), PERCENTILES))}


def validate_learning(resolver: Resolver, scenarios: ScenarioBuilder, facts: Facts, sources: Sequence[Path], *,
                      samples: int = 200, seed: int = 0, default_dir: Path | None = None,
                      references: Collection[str] = ()) -> Validation:
    """Score the learning calibration on held-out local learning conditions (never fitted to): error, bias,
    rank agreement (the ordering of H among others), interval coverage and decision regret per panel, as
    `validate` scores training runs. Inadmissible measurements are set aside and counted; a condition
    outside the calibrated territory is still scored (that is what held out means) and says so."""
    from ..engine.observation import admissible

    spec = facts.learning_fit
    preset = scenarios.presets.get(spec.preset)
    if preset is None:
        raise InputError(f"no learning calibration: catalog/presets/{spec.preset}.yaml is missing",
                         "fit it first: gpustack calibrate --learning")
    items = learning_items(sources, default_dir)
    successors = superseded_by(items)
    items, gone = in_force(items)
    items, refused = admissible(items)
    check_sources(items, references)
    leaked = sorted({i.obs.id for i in items} & fitted_ids(scenarios, [spec.preset]))
    if leaked:
        raise InputError(f"validate refuses {len(leaked)} observation(s) the learning calibration was fitted to: "
                         f"{', '.join(leaked[:5])}", "data fitted into the model cannot grade it")
    seen = (preset.get("fit") or {}).get("territory") or {}
    scored, table, unresolved = [], [], []
    for item in items:
        row = observation_row(item, scenarios, facts.measured_runs)
        scenario = scenarios.build([spec.preset], row.component.assign, origin=row.where)
        res = resolver.resolve(row.target, scenario)
        if res.value is None:
            unresolved.append({"id": row.id, "panel": row.panel, "where": row.where, "target": row.target,
                               "decision": row.decision.group if row.decision else None,
                               "reason": f"{row.target} still needs {', '.join(sorted(res.missing))}"})
            continue
        outside = [f"{k} = {v:g} outside the calibrated [{seen[k][0]:g}, {seen[k][1]:g}]"
                   for k, v in item.obs.learning.assign.items()
                   if k in seen and not seen[k][0] <= float(v) <= seen[k][1]]
        band = numeric_band(resolver, row.target, scenario, samples, seed)
        bounds = {level: (band[lo], band[hi]) for level, (lo, hi) in LEVELS.items()} if band else {}
        scored.append((row, scoring.Scored(row.panel, row.measured, res.value, bounds)))
        table.append({"id": row.id, "panel": row.panel, "where": row.where, "run": row.label, "target": row.target,
                      "units": res.units, "measured": row.measured, "measured_low": row.low,
                      "measured_high": row.high, "predicted": res.value,
                      "error": (res.value - row.measured) / row.measured,
                      **{f"p{p}": (band[p] if band else None) for p in (5, 25, 75, 95)},
                      "source": row.source, "assumed_fields": list(row.assumptions), "observations": list(row.ids),
                      "outside_territory": outside})
    skipped = [{"id": i.obs.id, "panel": i.obs.panel, "where": i.where, "superseded_by": successors[i.obs.id]}
               for i in gone]
    unresolved += [{"id": i.obs.id, "panel": i.obs.panel, "where": i.where, "target": i.obs.measures.variable,
                    "decision": None, "reason": f"inadmissible: {i.obs.inadmissible}"} for i in refused]
    unresolved.sort(key=lambda u: (u["panel"], u["id"]))
    names = sorted({r.panel for r, _ in scored} | {u["panel"] for u in unresolved})
    panels = {panel: _panel(panel, scored, unresolved) for panel in names}
    overall = None
    if scored:
        overall = {"n": len(scored), **scoring.errors([s.predicted for _, s in scored],
                                                      [s.measured for _, s in scored])}
    return Validation([str(s) for s in sources], spec.preset, table, unresolved, panels, overall, skipped)
