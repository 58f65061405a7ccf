"""Capacities over time: accelerators per site, storage bandwidth, WAN links, a site's power cap.

A calendar takes fixed-time reservations first (maintenance, a link's down windows), where a conflict
is an error, then places flexible ones (a checkpoint drain, a migration) at their earliest fit."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gpustack_compiler.base.errors import InputError

if TYPE_CHECKING:
    from .sites import Site, Sites


@dataclass
class Calendar:
    name: str
    capacity: float
    # (start_ns, end_ns, amount, what), kept sorted by start
    booked: list[tuple[int, int, float, str]] = field(default_factory=list)

    def load_at(self, t: int) -> float:
        return sum(a for s, e, a, _ in self.booked if s <= t < e)

    def _fits(self, start: int, end: int, amount: float) -> bool:
        # Load only rises where a reservation starts, so checking those instants (and `start`) is enough.
        points = [start] + [s for s, e, _, _ in self.booked if start < s < end]
        return all(self.load_at(t) + amount <= self.capacity for t in points)

    def _book(self, start: int, end: int, amount: float, what: str) -> None:
        self.booked.append((start, end, amount, what))
        self.booked.sort()

    def reserve_fixed(self, start: int, end: int, amount: float, what: str) -> None:
        if end <= start or amount < 0:
            raise InputError(f"{self.name}: {what}: empty or negative reservation")
        if not self._fits(start, end, amount):
            clash = next(w for s, e, _, w in self.booked if s < end and start < e)
            raise InputError(f"{self.name}: {what} conflicts with {clash} (capacity {self.capacity:g})")
        self._book(start, end, amount, what)

    def place_flexible(self, earliest: int, duration: int, amount: float, what: str) -> int:
        """Book at the earliest start at or after `earliest` where it fits; returns that start."""
        if amount > self.capacity:
            raise InputError(f"{self.name}: {what} needs {amount:g}, more than the capacity {self.capacity:g}")
        # The earliest fit starts at `earliest` or when some reservation ends.
        for start in sorted({earliest} | {e for _, e, _, _ in self.booked if e > earliest}):
            if self._fits(start, start + duration, amount):
                self._book(start, start + duration, amount, what)
                return start
        raise AssertionError("unreachable: after the last reservation ends everything fits")


def signal_calendars(site: Site) -> dict[str, Calendar]:
    """A site's grid and cooling signals, fixed reservations of a calendar per kind that holds one at a time:
    two windows of one kind that overlap are a conflict (which limit would hold is not said)."""
    out = {kind: Calendar(f"{site.name}.{kind}_signals", 1.0) for kind in ("grid", "cooling")}
    for j, sig in enumerate(site.signals):
        out[sig.kind].reserve_fixed(sig.start_ns, sig.end_ns, 1.0, f"signals.{j}")
    return out


def site_calendars(sites: Sites) -> dict[str, Calendar]:
    """One calendar per capacity; a link's time outside its availability windows is booked as down, and a
    site's grid and cooling signals are booked on their own calendars."""
    out: dict[str, Calendar] = {}
    for s in sites.sites:
        out[f"{s.name}.accelerators"] = Calendar(f"{s.name}.accelerators", s.effective_accelerators)
        out[f"{s.name}.storage_bandwidth"] = Calendar(f"{s.name}.storage_bandwidth", s.storage_bandwidth_bit_s)
        out[f"{s.name}.power"] = Calendar(f"{s.name}.power", s.power_cap_w)
        out.update({cal.name: cal for cal in signal_calendars(s).values()})
    for link in sites.links:
        cal = Calendar(link.name, link.bandwidth_bit_s)
        for start, end in link.down_ns():
            cal.reserve_fixed(start, end, link.bandwidth_bit_s, "link down")
        out[cal.name] = cal
    return out
