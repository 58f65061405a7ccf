"""The research score of the model, in one place: predictive error, rank agreement, interval coverage and
decision regret of predictions against measurements, and the aggregation of replicated measurements.

Pure functions of numbers (no catalog, no engine), so `validate`, `calibrate` and the experiments
runner compute each statistic the same way. Coverage is kept per panel and per confidence level and never
pooled across panels: panels differ in hardware, era and measurement convention, and a pooled rate would
hide a panel whose intervals are systematically off.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np


def relative_errors(predicted: Sequence[float], measured: Sequence[float]) -> list[float]:
    """(predicted - measured) / measured for each pair."""
    if len(predicted) != len(measured):
        raise ValueError("predicted and measured differ in length")
    return [(p - m) / m for p, m in zip(predicted, measured)]


def errors(predicted: Sequence[float], measured: Sequence[float]) -> dict:
    """MAPE, max |relative error| and signed bias (mean relative error: > 0 the model over-predicts)."""
    rel = np.array(relative_errors(predicted, measured))
    if not rel.size:
        raise ValueError("no predictions to score")
    # numpy's pairwise mean, as the figures published before this module were computed.
    return {"mape": float(np.mean(np.abs(rel))), "max_abs_error": float(np.max(np.abs(rel))),
            "bias": float(np.mean(rel))}


def average_ranks(values: Sequence[float]) -> list[float]:
    """Ranks from 1, ties sharing the mean of the ranks they span (so a tie never depends on row order)."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def spearman(a: Sequence[float], b: Sequence[float]) -> float | None:
    """Spearman's rho: Pearson correlation of average ranks. None below two pairs or when one side is
    constant (rank agreement is then undefined)."""
    if len(a) != len(b):
        raise ValueError("a and b differ in length")
    if len(a) < 2:
        return None
    ra, rb = average_ranks(a), average_ranks(b)
    ma, mb = math.fsum(ra) / len(ra), math.fsum(rb) / len(rb)
    sab = math.fsum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    saa, sbb = math.fsum((x - ma) ** 2 for x in ra), math.fsum((y - mb) ** 2 for y in rb)
    if saa == 0 or sbb == 0:
        return None
    return sab / math.sqrt(saa * sbb)


def kendall_tau_b(a: Sequence[float], b: Sequence[float]) -> float | None:
    """Kendall's tau-b: (concordant - discordant) / sqrt((n0 - ties in a) (n0 - ties in b)) over all pairs,
    n0 = n (n - 1) / 2. None below two pairs or when one side is constant."""
    if len(a) != len(b):
        raise ValueError("a and b differ in length")
    n = len(a)
    if n < 2:
        return None
    concordant = discordant = ties_a = ties_b = 0
    for i in range(n):
        for j in range(i + 1, n):
            da, db = a[i] - a[j], b[i] - b[j]
            if da == 0:
                ties_a += 1
            if db == 0:
                ties_b += 1
            if da and db:
                if (da > 0) == (db > 0):
                    concordant += 1
                else:
                    discordant += 1
    n0 = n * (n - 1) // 2
    denominator = math.sqrt((n0 - ties_a) * (n0 - ties_b))
    return (concordant - discordant) / denominator if denominator else None


@dataclass(frozen=True)
class Coverage:
    covered: int
    n: int

    @property
    def fraction(self) -> float:
        return self.covered / self.n

    def to_dict(self) -> dict:
        return {"covered": self.covered, "n": self.n, "fraction": self.fraction}


@dataclass(frozen=True)
class Scored:
    """One scored measurement: what was measured, what was predicted, and the prediction's intervals
    by confidence level (a fraction such as 0.9 -> (low, high))."""

    panel: str
    measured: float
    predicted: float
    intervals: Mapping[float, tuple[float, float]]


def coverage(rows: Sequence[Scored]) -> dict[str, dict[float, Coverage]]:
    """panel -> level -> how many measured values fall inside the prediction interval at that level
    (bounds included). Rows without an interval at a level do not count towards it."""
    out: dict[str, dict[float, list[int]]] = {}
    for r in rows:
        for level, (low, high) in r.intervals.items():
            cell = out.setdefault(r.panel, {}).setdefault(level, [0, 0])
            cell[0] += low <= r.measured <= high
            cell[1] += 1
    return {panel: {level: Coverage(c, n) for level, (c, n) in sorted(levels.items())}
            for panel, levels in sorted(out.items())}


@dataclass(frozen=True)
class Regret:
    """One decision: the layout the model ranks first against the best measured one."""

    group: str
    chosen: str
    best: str
    regret: float

    def to_dict(self) -> dict:
        return {"group": self.group, "chosen": self.chosen, "best": self.best, "regret": self.regret}


def decision_regret(group: str, options: Mapping[str, tuple[float, float]], better: str) -> Regret:
    """Regret of choosing by prediction among `options` (label -> (measured, predicted)), as a fraction
    of the best measured throughput: (best - chosen) / best for a throughput (`better` = 'higher'); for a
    time per unit of work (`better` = 'lower') throughput is its reciprocal, so 1 - best / chosen.
    Ties in prediction go to the first label in order, so the result is deterministic."""
    if len(options) < 2:
        raise ValueError(f"decision {group}: needs at least two options")
    if better not in ("higher", "lower"):
        raise ValueError(f"decision {group}: better is 'higher' or 'lower', not {better!r}")
    pick = max if better == "higher" else min
    labels = list(options)
    chosen = pick(labels, key=lambda k: options[k][1])
    best = pick(labels, key=lambda k: options[k][0])
    m_best, m_chosen = options[best][0], options[chosen][0]
    regret = (m_best - m_chosen) / m_best if better == "higher" else 1 - m_best / m_chosen
    return Regret(group, chosen, best, regret)


@dataclass(frozen=True)
class Aggregate:
    """Replicated measurements of one quantity on one run, scored once: the mean, and an uncertainty
    spanning every replicate's interval."""

    value: float
    low: float
    high: float
    n: int
    sd: float | None  # sample standard deviation of the values; None for a single one


def aggregate(values: Sequence[float], lows: Sequence[float], highs: Sequence[float]) -> Aggregate:
    if not values or not len(values) == len(lows) == len(highs):
        raise ValueError("aggregate: values, lows and highs must be non-empty and of one length")
    n = len(values)
    mean = math.fsum(values) / n
    sd = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else None
    return Aggregate(mean, min(lows), max(highs), n, sd)
