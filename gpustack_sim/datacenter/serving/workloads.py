"""Workload families: an arrival process and request-length distributions, read from data/workloads/*.yaml
(compact distributions derived from public traces, or scenario generators) or a trace file of requests
(CSV: arrival time in seconds, prompt tokens, output tokens). Nothing is downloaded: a family is a file."""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml

from gpustack_compiler.base.errors import InputError

WORKLOADS_DIR = Path(__file__).resolve().parents[3] / "data" / "workloads"
TRACE_HEADERS = (("time_s", "input_tokens", "output_tokens"), ("TIMESTAMP", "ContextTokens", "GeneratedTokens"))


@dataclass(frozen=True)
class Requests:
    """A request stream, sorted by arrival: seconds from the start, prompt and output tokens, and whether the
    request may be shed (deferred or rejected) under a grid event."""

    arrival_s: np.ndarray
    input_tokens: np.ndarray
    output_tokens: np.ndarray
    sheddable: np.ndarray
    clipped: int = 0  # requests shortened to fit the model's context

    def __len__(self) -> int:
        return len(self.arrival_s)


@dataclass(frozen=True)
class Family:
    name: str
    family: str
    kind: str
    description: str
    arrivals: dict
    input_tokens: dict
    output_tokens: dict
    source: dict | None
    path: str
    trace: Requests | None = None  # a trace file's own requests, replayed as they are

    def generate(self, rate_per_s: float, horizon_s: float, run_lengths: dict, load_curve: list[float] | None,
                 context: int, rng: np.random.Generator, sheddable_share: float = 0.0) -> Requests:
        """Requests over [0, horizon_s). `rate_per_s`: the mean rate (the peak for a profile scaled to its
        peak); `run_lengths`: the run file's {input_tokens, output_tokens: {mean, max}}."""
        if not rate_per_s > 0 or not math.isfinite(rate_per_s):
            raise InputError(f"{self.path}: rate {rate_per_s!r} requests/s is not positive")
        if self.trace is not None:
            keep = self.trace.arrival_s < horizon_s
            t, i, o = self.trace.arrival_s[keep], self.trace.input_tokens[keep], self.trace.output_tokens[keep]
        else:
            t = self._arrivals(rate_per_s, horizon_s, load_curve, rng)
            i = self._lengths(self.input_tokens, run_lengths["input_tokens"], len(t), rng, "input_tokens")
            o = self._lengths(self.output_tokens, run_lengths["output_tokens"], len(t), rng, "output_tokens")
        i2 = np.minimum(i, context - 1)
        o2 = np.minimum(o, context - i2)
        shed = rng.random(len(t)) < sheddable_share
        return Requests(t, i2.astype(np.int64), o2.astype(np.int64), shed, int(np.sum((i2 < i) | (o2 < o))))

    def _arrivals(self, rate: float, horizon: float, load_curve, rng) -> np.ndarray:
        a = self.arrivals
        if a["process"] == "batches":
            every = float(a["every_s"])
            starts = np.arange(0.0, horizon, every)
            counts = rng.poisson(rate * every, len(starts))
            return np.repeat(starts, counts)
        rel = load_curve if a["relative_rate"] == "run_load_curve" else a["relative_rate"]
        if rel is None:
            raise InputError(f"{self.path}: arrivals.relative_rate: the run file has no workload.load_curve")
        rel = np.asarray(rel, dtype=float)
        scale = rel.max() if a.get("scale") == "peak" else rel.mean()
        bins = max(1, math.ceil(horizon / float(a["bin_s"])))
        profile = rel[np.arange(bins) % len(rel)] / scale * rate
        edges = np.minimum(np.arange(bins + 1) * float(a["bin_s"]), horizon)
        cumulative = np.concatenate([[0.0], np.cumsum(profile * np.diff(edges))])
        # A unit-rate gamma renewal process (gap CV `gap_cv`; 1 is Poisson) warped through the cumulative
        # intensity keeps the profile's rate and the gaps' relative spread.
        cv = float(a.get("gap_cv", 1.0))
        shape = 1.0 / cv**2
        expected = cumulative[-1]
        n = int(expected + 10 * math.sqrt(expected * max(cv**2, 1.0)) + 10)
        units = np.cumsum(rng.gamma(shape, 1.0 / shape, n))
        units = units[units < expected]
        return np.interp(units, cumulative, edges)

    def _lengths(self, spec: dict, run: dict, n: int, rng, what: str) -> np.ndarray:
        if "quantiles" in spec:
            q = np.asarray(spec["quantiles"], dtype=float)
            values = np.interp(rng.random(n), np.linspace(0, 1, len(q)), q)
        elif "lognormal" in spec:
            ln = spec["lognormal"]
            values = float(ln["median"]) * np.exp(float(ln["sigma"]) * rng.standard_normal(n))
        elif spec.get("run") == "fixed":
            values = np.full(n, float(run["mean"]))
        elif spec.get("run") == "exponential":
            values = rng.exponential(float(run["mean"]), n)
        else:
            raise InputError(f"{self.path}: {what}: give quantiles, lognormal, or run: fixed | exponential")
        top = run.get("max")
        values = np.maximum(1, np.rint(values))
        return np.minimum(values, top) if top is not None and "run" in spec else values


def family_names() -> list[str]:
    return sorted(p.stem for p in WORKLOADS_DIR.glob("*.yaml"))


def load_family(name: str) -> Family:
    """A family by name (data/workloads/NAME.yaml), or a family file, or a trace CSV, by path."""
    path = Path(name)
    if path.suffix == ".csv":
        return _trace_family(path)
    if path.suffix not in (".yaml", ".yml"):
        path = WORKLOADS_DIR / f"{name}.yaml"
        if not path.is_file():
            raise InputError(f"--arrivals: unknown workload family {name!r}", f"one of {', '.join(family_names())}, "
                             "a family file (.yaml) or a trace (.csv)")
    if not path.is_file():
        raise InputError(f"--arrivals: {path}: no such file")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise InputError(f"{path}: not YAML ({e.__class__.__name__})") from None
    if not isinstance(data, dict):
        raise InputError(f"{path}: a workload family is a mapping")
    for key in ("name", "family", "kind", "arrivals", "input_tokens", "output_tokens"):
        if key not in data:
            raise InputError(f"{path}: field {key}: missing")
    arrivals = data["arrivals"]
    process = arrivals.get("process") if isinstance(arrivals, dict) else None
    if process not in ("profile", "trace_profile", "batches"):
        raise InputError(f"{path}: field arrivals.process: {process!r} is not profile, trace_profile or batches")
    if process == "batches":
        _positive(path, "arrivals.every_s", arrivals.get("every_s"))
    else:
        _positive(path, "arrivals.bin_s", arrivals.get("bin_s"))
        _positive(path, "arrivals.gap_cv", arrivals.get("gap_cv", 1.0))
        rel = arrivals.get("relative_rate")
        if rel != "run_load_curve" and (not isinstance(rel, list) or not rel or
                                        any(not isinstance(x, (int, float)) or x < 0 for x in rel) or max(rel) <= 0):
            raise InputError(f"{path}: field arrivals.relative_rate: non-negative numbers with a positive peak")
    for what in ("input_tokens", "output_tokens"):
        spec = data[what]
        if not isinstance(spec, dict):
            raise InputError(f"{path}: field {what}: a mapping")
        if "quantiles" in spec and (len(spec["quantiles"]) < 2 or any(
                not isinstance(x, (int, float)) or x < 1 for x in spec["quantiles"])):
            raise InputError(f"{path}: field {what}.quantiles: at least two lengths of one token or more")
        if "lognormal" in spec:
            _positive(path, f"{what}.lognormal.median", spec["lognormal"].get("median"))
            _positive(path, f"{what}.lognormal.sigma", spec["lognormal"].get("sigma"))
    return Family(str(data["name"]), str(data["family"]), str(data["kind"]), str(data.get("description", "")),
                  arrivals, data["input_tokens"], data["output_tokens"], data.get("source"), str(path))


def _positive(path: Path, field: str, value) -> None:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0 or not math.isfinite(value):
        raise InputError(f"{path}: field {field}: {value!r} is not a positive number")


def _trace_family(path: Path) -> Family:
    if not path.is_file():
        raise InputError(f"--arrivals: {path}: no such file")
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    if not rows or tuple(c.strip() for c in rows[0]) not in TRACE_HEADERS:
        raise InputError(f"{path}: line 1: header must be {','.join(TRACE_HEADERS[0])} (or the Azure trace's "
                         f"{','.join(TRACE_HEADERS[1])})")
    azure = tuple(c.strip() for c in rows[0]) == TRACE_HEADERS[1]
    t, i, o = [], [], []
    for n, row in enumerate(rows[1:], start=2):
        if len(row) != 3:
            raise InputError(f"{path}: line {n}: {len(row)} fields, the header has 3 (ragged row)")
        for k, (dest, read) in enumerate(((t, _azure_time if azure else float), (i, int), (o, int))):
            try:
                dest.append(read(row[k]))
            except ValueError:
                raise InputError(f"{path}: line {n}: field {rows[0][k].strip()}: {row[k]!r} is not a number") from None
        if not math.isfinite(t[-1]) or t[-1] < 0 or i[-1] < 1 or o[-1] < 1:
            raise InputError(f"{path}: line {n}: field {rows[0][0]}/{rows[0][1]}/{rows[0][2]}: times are non-negative, "
                             "lengths at least one token")
    if not t:
        raise InputError(f"{path}: no requests")
    ta = np.asarray(t)
    if azure:
        ta -= ta.min()
    order = np.argsort(ta, kind="stable")
    reqs = Requests(ta[order], np.asarray(i)[order], np.asarray(o)[order], np.zeros(len(t), bool))
    return Family(path.stem, "trace", "trace_file", f"requests of {path}", {"process": "trace"}, {}, {}, None,
                  str(path), reqs)


def _azure_time(text: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(text.strip()[:26]).timestamp()
