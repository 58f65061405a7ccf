"""Intervals and sample sizes with the standard library alone (scipy is not a dependency).

The regularized incomplete beta function I_x(a, b) (continued fraction, modified Lentz) underlies both
the exact Clopper–Pearson bounds of a proportion (beta quantiles) and Student's t distribution (its
CDF is an incomplete beta); quantiles are found by bisection, which is exact to float precision here
because both CDFs are monotone.

Interval convention: a metric's interval at level L is two-sided and central, so each bound on its own
is a one-sided bound at (1 + L) / 2: the bounds of a 90% interval are 95% one-sided bounds."""

from __future__ import annotations

import math
from collections.abc import Sequence

_EPS = 1e-15
_TINY = 1e-300


def betainc(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta I_x(a, b) for a, b > 0 and 0 <= x <= 1."""
    if not (a > 0 and b > 0):
        raise ValueError("betainc: a and b must be positive")
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    # The continued fraction converges fast for x < (a + 1) / (a + b + 2); use the symmetry otherwise.
    if x < (a + 1) / (a + b + 2):
        return math.exp(log_front) * _betacf(a, b, x) / a
    return 1.0 - math.exp(log_front) * _betacf(b, a, 1.0 - x) / b


def _betacf(a: float, b: float, x: float) -> float:
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > _TINY else _TINY)
    h = d
    for m in range(1, 10000):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > _TINY else _TINY)
        c = 1.0 + aa / c
        c = c if abs(c) > _TINY else _TINY
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > _TINY else _TINY)
        c = 1.0 + aa / c
        c = c if abs(c) > _TINY else _TINY
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < _EPS:
            return h
    raise ArithmeticError(f"betainc({a}, {b}, {x}): continued fraction did not converge")


def _bisect(f, lo: float, hi: float, target: float, iterations: int = 200) -> float:
    """x in [lo, hi] with f(x) = target for an increasing f."""
    for _ in range(iterations):
        mid = (lo + hi) / 2
        if mid in (lo, hi):
            break
        if f(mid) < target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def beta_ppf(q: float, a: float, b: float) -> float:
    """Quantile of the Beta(a, b) distribution."""
    if q <= 0:
        return 0.0
    if q >= 1:
        return 1.0
    return _bisect(lambda x: betainc(a, b, x), 0.0, 1.0, q)


def clopper_pearson(successes: int, trials: int, level: float) -> tuple[float, float]:
    """Exact two-sided Clopper–Pearson interval at `level`; each bound is one-sided at (1 + level) / 2."""
    if trials < 1 or not 0 <= successes <= trials:
        raise ValueError(f"clopper_pearson: {successes} successes of {trials} trials")
    alpha = (1 - level) / 2
    lower = 0.0 if successes == 0 else beta_ppf(alpha, successes, trials - successes + 1)
    upper = 1.0 if successes == trials else beta_ppf(1 - alpha, successes + 1, trials - successes)
    return lower, upper


def t_cdf(t: float, df: float) -> float:
    """CDF of Student's t with `df` degrees of freedom."""
    tail = 0.5 * betainc(df / 2, 0.5, df / (df + t * t))
    return 1.0 - tail if t > 0 else tail


def t_ppf(q: float, df: float) -> float:
    """Quantile of Student's t."""
    if not 0 < q < 1:
        raise ValueError("t_ppf: q must be in (0, 1)")
    if q == 0.5:
        return 0.0
    if q < 0.5:
        return -t_ppf(1 - q, df)
    hi = 1.0
    while t_cdf(hi, df) < q:
        hi *= 2
    return _bisect(lambda t: t_cdf(t, df), 0.0, hi, q)


def mean_interval(values: Sequence[float], level: float) -> tuple[float, float | None, float | None, float | None]:
    """(mean, lower, upper, standard deviation) with Student's t interval; bounds None below 2 values."""
    n = len(values)
    if n == 0:
        raise ValueError("mean_interval: no values")
    mean = math.fsum(values) / n
    if n < 2:
        return mean, None, None, None
    sd = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (n - 1))
    half = t_ppf((1 + level) / 2, n - 1) * sd / math.sqrt(n)
    return mean, mean - half, mean + half, sd


def compare(value: float, op: str, threshold: float, upper: float | None = None) -> bool:
    if op == "lt":
        return value < threshold
    if op == "le":
        return value <= threshold
    if op == "gt":
        return value > threshold
    if op == "ge":
        return value >= threshold
    if op == "between":
        return threshold <= value <= upper
    raise ValueError(f"unknown comparison {op!r}")


MAX_AUDIT_TRIALS = 1_000_000
MAX_BETWEEN_SCAN = 2000


def min_trials_proportion(op: str, bound: str, threshold: float, upper: float | None, level: float) -> int | None:
    """Smallest number of trials at which a Clopper–Pearson comparison can pass at all (the most
    favourable outcome: every trial a success, or none, whichever helps), or None if it never can.

    Example: a 95% one-sided lower bound (a 90% interval) >= 0.99 needs 299 trials without a miss,
    since the lower bound with n successes of n is 0.05 ** (1 / n)."""
    def passes(n: int) -> bool:
        if bound == "point":
            return any(compare(x / n, op, threshold, upper) for x in _favourable(n, op, threshold, upper))
        for x in _favourable(n, op, threshold, upper):
            lo, hi = clopper_pearson(x, n, level)
            if compare(lo if bound == "lower" else hi, op, threshold, upper):
                return True
        return False

    if op == "between":
        # Not monotone in n (a count must land inside a window): scan.
        return next((n for n in range(1, MAX_BETWEEN_SCAN + 1) if passes(n)), None)
    # The favourable bound moves monotonically towards 1 (or 0) with n: exponential then binary search.
    hi = 1
    while not passes(hi):
        hi *= 2
        if hi > MAX_AUDIT_TRIALS:
            return None
    lo = hi // 2 + 1 if hi > 1 else 1
    while lo < hi:
        mid = (lo + hi) // 2
        if passes(mid):
            hi = mid
        else:
            lo = mid + 1
    return hi


def _favourable(n: int, op: str, threshold: float = 0.0, upper: float | None = None) -> range:
    if op in ("gt", "ge"):
        return range(n, n + 1)
    if op in ("lt", "le"):
        return range(0, 1)
    # between: a count near the window (a bound lies within about a few counts of x / n at small n)
    return range(max(0, math.floor(threshold * n) - 1), n + 1)
