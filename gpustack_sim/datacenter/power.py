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
    edges = list(range(w0, w1, step)) + [w1]
    bins = len(edges) - 1
    ns = {ph: [0] * bins for ph in PHASES}  # exact node-nanoseconds (Python ints do not overflow)
    joules = {ph: [0.0] * bins for ph in PHASES}
    undefined = {ph: [False] * bins for ph in PHASES}
    for piece in pieces:
        nodes = dict(piece.site_nodes).get(site, 0)
        a, b = max(piece.t0, w0), min(piece.t1, w1)
        if not nodes or a >= b:
            continue
        first = (a - w0) // step
        cuts = [a] + edges[first + 1:min((b - 1 - w0) // step, bins - 1) + 1] + [b]
        prev = _cumulative(piece, a)
        for i, cut in enumerate(cuts[1:], start=first):
            now = _cumulative(piece, cut)
            for ph, watts, before, after in zip(PHASES, piece.powers, prev, now):
                if after > before:
                    ns[ph][i] += (after - before) * nodes
                    # Node power can differ between layouts: the energy is summed piece by piece.
                    if watts is None:
                        undefined[ph][i] = True
                    else:
                        joules[ph][i] += watts * (after - before) * nodes / NS_PER_S
            prev = now
    width = np.diff(np.array(edges, dtype=np.int64)) / NS_PER_S
    power_w = {ph: np.where(undefined[ph], np.nan, np.array(joules[ph]) / width) for ph in PHASES}
    return PowerSeries(site, np.array(edges[:-1], dtype=np.int64) / NS_PER_S, width,
                       {ph: np.array(v, dtype=float) / NS_PER_S for ph, v in ns.items()}, power_w,
                       tuple(ph for ph in PHASES if any(undefined[ph])))


def _cumulative(piece: Piece, t: int) -> tuple[int, int, int, int]:
    """Nanoseconds per phase (PHASES order) from the piece's start to t."""
    if piece.run is None:
        return 0, 0, 0, t - piece.t0
    _, compute, comm, block = piece.run.phases(t)
    return compute, comm, block, 0
