"""A site's node power over time, by phase, derived from one logged replication.

The replay keeps the stretches in which a fixed set of nodes runs the job or idles (`Piece`s). Within a
running stretch the time spent in each phase up to any instant is known in closed form (`_Run.phases`),
so the node-time of each phase in a time bin is exact, and the bins' node-time adds up to the replay's
own: the integral of the series is the energy the result reports."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpustack_compiler.base.errors import InputError
from gpustack_compiler.base.limits import MAX_POWER_BINS, refuse_over

from .events import NS_PER_S, to_ns
from .simulation import PHASES, Piece


@dataclass(frozen=True)
class PowerSeries:
    """Mean node IT power of the job at one site in each time bin, per phase. Where a phase ran without a
    catalog node power its power is NaN (undefined, not zero), and the phase is named in `undefined`."""

    site: str
    start_s: np.ndarray  # bin starts, seconds since the job started
    width_s: np.ndarray  # bin widths (the last bin may be shorter than the resolution)
    node_s: dict[str, np.ndarray]  # phase -> node-seconds spent in it in each bin
    power_w: dict[str, np.ndarray]  # phase -> mean power in each bin
    undefined: tuple[str, ...]

    @property
    def total_w(self) -> np.ndarray:
        """All phases together; NaN in the bins where a phase without a catalog power ran."""
        return sum(self.power_w[ph] for ph in PHASES)

    def energy_j(self) -> float:
        """The integral over the bins of the phases with a catalog power (what the result's energy counts)."""
        return float(sum(np.sum(self.power_w[ph] * self.width_s) for ph in PHASES if ph not in self.undefined))


def power_series(pieces: tuple[Piece, ...], site: str, resolution_s: float, window_ns: tuple[int, int]) -> PowerSeries:
    if not resolution_s > 0:
        raise InputError(f"power series: resolution {resolution_s!r} s is not positive")
    w0, w1 = window_ns
    step = to_ns(resolution_s)
    if step < 1:
        raise InputError(f"power series: resolution {resolution_s!r} s is under a nanosecond")
    refuse_over(-(-(w1 - w0) // step), MAX_POWER_BINS, f"power series: bins of {resolution_s:g} s over "
                f"{(w1 - w0) / NS_PER_S:,.6g} s", "a coarser resolution")
    edges = np.append(np.arange(w0, w1, step, dtype=np.int64), np.int64(w1))
    bins = len(edges) - 1
    node_ns = {ph: np.zeros(bins) for ph in PHASES}
    joules = {ph: np.zeros(bins) for ph in PHASES}
    undefined = {ph: np.zeros(bins, dtype=bool) for ph in PHASES}
    for piece in pieces:
        nodes = dict(piece.site_nodes).get(site, 0)
        a, b = max(piece.t0, w0), min(piece.t1, w1)
        if not nodes or a >= b:
            continue
        i0, i1 = (a - w0) // step, min((b - 1 - w0) // step, bins - 1) + 1  # the bins [i0, i1) the piece meets
        at = np.clip(edges[i0:i1 + 1], a, b)
        times, cum = _breaks(piece, a, b, at)
        for k, (ph, watts) in enumerate(zip(PHASES, piece.powers)):
            # Between two breaks every phase's time grows linearly: interpolation is exact up to rounding.
            spent = np.diff(np.interp(at, times, cum[:, k])) * nodes
            if not spent.any():
                continue
            node_ns[ph][i0:i1] += spent
            # Node power can differ between layouts: the energy is summed piece by piece.
            if watts is None:
                undefined[ph][i0:i1] |= spent > 0
            else:
                joules[ph][i0:i1] += watts * spent / NS_PER_S
    width = np.diff(edges) / NS_PER_S
    power_w = {ph: np.where(undefined[ph], np.nan, joules[ph] / width) for ph in PHASES}
    return PowerSeries(site, edges[:-1] / NS_PER_S, width, {ph: v / NS_PER_S for ph, v in node_ns.items()}, power_w,
                       tuple(ph for ph in PHASES if undefined[ph].any()))


def _breaks(piece: Piece, a: int, b: int, cuts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Instants in [a, b] between which every phase's time grows linearly, and the nanoseconds per phase
    (PHASES order) from the piece's start to each, exact. A waiting piece has only its ends; a run without
    cross-site synchronisations changes shares only where a checkpoint snapshot starts or ends; a run with
    them is evaluated at every bin edge."""
    if piece.run is None or piece.run.timing.sync_every:
        times = np.unique(np.concatenate(([a, b], cuts))) if piece.run is not None else np.array([a, b])
        return times, np.array([_cumulative(piece, int(t)) for t in times], dtype=float)
    run = piece.run
    first = run.checkpoints_by(a, 0) + 1  # the first snapshot starting after a
    last = run.checkpoints_by(b - 1, 0)  # the last starting before b
    inner = np.empty((0, len(PHASES)))
    times = np.empty(0, dtype=np.int64)
    if last >= first:
        j = np.arange(first, last + 1, dtype=np.int64)
        pos = run.anchor + (run.skip + j) * run.k
        tm = run.timing
        compute_ns = np.rint(np.minimum(pos * tm.tokens_per_step, tm.budget) / tm.tps * NS_PER_S).astype(np.int64)
        steps_ns = compute_ns - tm.compute_ns(run.p0)
        starts = run.t0 + compute_ns - run.base + (j - 1) * run.block_ns
        comm = np.rint(steps_ns * run.comm_ratio)
        blocks = (j - 1) * run.block_ns
        ends = np.minimum(starts + run.block_ns, b)
        zero = np.zeros(len(j))
        at_start = np.column_stack((starts - run.t0 - comm - blocks, comm, blocks, zero, zero))
        at_end = at_start + np.column_stack((zero, zero, ends - starts, zero, zero))
        keep = ends < b
        times = np.column_stack((starts, ends)).ravel()[: 2 * len(j) - (0 if keep[-1] else 1)]
        inner = np.stack((at_start, at_end), axis=1).reshape(-1, len(PHASES))[: len(times)]
    # A snapshot under way at a ends inside the window: a break too.
    under_way = run.checkpoints_by(a, 0)
    ends_at = run.ckpt_start(under_way) + run.block_ns if under_way else a
    head = [a] + ([min(ends_at, b)] if a < ends_at < b else [])
    times = np.concatenate((head, times, [b]))
    cum = np.vstack([_cumulative(piece, t) for t in head] + [inner, _cumulative(piece, b)]).astype(float)
    return times, cum


def _cumulative(piece: Piece, t: int) -> tuple[int, ...]:
    """Nanoseconds per phase (PHASES order) from the piece's start to t."""
    if piece.run is None:
        return tuple(t - piece.t0 if ph == piece.waiting else 0 for ph in PHASES)
    _, compute, comm, block = piece.run.phases(t)
    return compute, comm, block, 0, 0
