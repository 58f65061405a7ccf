"""Validation: predict measured runs with the calibrated model and score the predictions (error,
bias, rank correlation, interval coverage). It only predicts: nothing here is fitted."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gpustack_compiler.errors import InputError

from ..engine.facts import Facts
from ..engine.resolver import ResolveError, Resolver
from ..engine.scenario import ScenarioBuilder
from .calibrate import errors, read_rows, spearman
from .estimate import fitted_distributions, intervals


@dataclass
class Validation:
    rows: list[dict]
    stats: dict  # mape, max_abs_error, bias
    spearman: float
    interval_coverage: float | None

    def to_dict(self) -> dict:
        return {**self.stats, "spearman": self.spearman, "interval_coverage": self.interval_coverage,
                "rows": self.rows}


def validate(resolver: Resolver, scenarios: ScenarioBuilder, facts: Facts, runs_csv: Path, samples: int,
             seed: int) -> Validation:
    rows = read_rows(runs_csv, facts.measured_runs, ["calibration"])
    table = []
    for row in rows:
        scenario = facts.run_fields.scenario(scenarios, row.run)
        try:
            res = resolver.resolve(row.target, scenario)
        except ResolveError as exc:
            raise InputError(f"{runs_csv}:{row.line} (row {row.index}): {exc.message}", exc.hint) from None
        if res.value is None:
            raise InputError(f"{runs_csv}:{row.line} (row {row.index}): {row.target} still needs "
                             f"{', '.join(sorted(res.missing))}")
        dists = fitted_distributions(scenario)
        band = intervals(resolver, scenario, [row.target], dists, samples, seed).get(row.target) if dists else None
        table.append({"row": row.index, "run": row.label, "target": row.target, "units": res.units,
                      "measured": row.measured, "predicted": res.value,
                      "error": (res.value - row.measured) / row.measured,
                      "p5": band[5] if band else None, "p95": band[95] if band else None})
    measured, predicted = [t["measured"] for t in table], [t["predicted"] for t in table]
    covered = [t for t in table if t["p5"] is not None]
    coverage = (sum(t["p5"] <= t["measured"] <= t["p95"] for t in covered) / len(covered)) if covered else None
    return Validation(table, errors(predicted, measured), spearman(predicted, measured), coverage)
