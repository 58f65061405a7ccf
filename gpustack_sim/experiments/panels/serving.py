"""Helpers shared by the panels that replay an inference fleet (E004, E006): the scenario file, the
replica parameters of a serving run in a layout, and utility (SLO-attaining output tokens per joule)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
import yaml

from gpustack_compiler.base.errors import InputError

from .base import PanelContext


def scenario(ctx: PanelContext) -> tuple[dict, str]:
    """experiments/serving/<id>.yaml (choices, not data) and its sha256."""
    path = ctx.path(f"experiments/serving/{ctx.protocol.spec.id.lower()}.yaml")
    if not path.is_file():
        raise InputError(f"{path}: the serving scenario of {ctx.protocol.spec.id} is missing")
    text = path.read_bytes()
    return yaml.safe_load(text), "sha256:" + hashlib.sha256(text).hexdigest()


def replica_params(ctx: PanelContext, run_path: str, overrides: tuple[str, ...] = ()):
    from ...datacenter.serving import replica_parameters

    run = ctx.engine.load_run(ctx.path(run_path), list(overrides))
    params, _ = replica_parameters(ctx.engine.context, run)
    w = run.workload
    lengths = {k: {"mean": getattr(w, k).mean, "max": getattr(w, k).max} for k in ("input_tokens", "output_tokens")}
    return params, lengths, run.model.seq_len


@dataclass(frozen=True)
class Outcome:
    """What a replay leaves for a panel's metrics: per-request SLO results and per-tick energy."""

    good_tokens: np.ndarray  # output tokens of each request that met both objectives (0 otherwise)
    finish_s: np.ndarray
    arrival_s: np.ndarray
    ttft_ok: np.ndarray
    tpot_ok: np.ndarray
    ttft_ratio: np.ndarray  # TTFT over its objective (inf when never served)
    tpot_ratio: np.ndarray
    energy_per_tick_j: np.ndarray  # (ticks, sites)
    tick_s: float


def outcome(run) -> Outcome:
    r, log = run.requests, run.log
    done = ~np.isnan(log.finish_s)
    ttft = np.where(done, log.first_token_s - r.arrival_s, np.inf)
    tpot = np.where(done & (r.output_tokens > 1),
                    (log.finish_s - log.first_token_s) / np.maximum(1, r.output_tokens - 1), 0.0)
    tpot = np.where(done, tpot, np.inf)
    ok1, ok2 = ttft <= run.ttft_objective_s, tpot <= run.tpot_objective_s
    good = np.where(ok1 & ok2, r.output_tokens, 0).astype(float)
    return Outcome(good, np.where(done, log.finish_s, np.inf), r.arrival_s, ok1, ok2,
                   ttft / run.ttft_objective_s, tpot / run.tpot_objective_s, run.site_power_w * run.tick_s, run.tick_s)


def utility(o: Outcome, t0: float = 0.0, t1: float = float("inf")) -> float:
    """SLO-attaining output tokens finished in [t0, t1) per joule drawn in it."""
    k0, k1 = int(t0 / o.tick_s), min(len(o.energy_per_tick_j), int(np.ceil(min(t1, 1e18) / o.tick_s)))
    energy = float(o.energy_per_tick_j[k0:k1].sum())
    tokens = float(o.good_tokens[(o.finish_s >= t0) & (o.finish_s < t1)].sum())
    return tokens / energy if energy > 0 else 0.0


def trace_key(requests) -> tuple[int, ...]:
    """The request stream's first arrivals in ns: the runner's common-random-numbers check compares them."""
    return tuple(int(x * 1e9) for x in requests.arrival_s[:16])
