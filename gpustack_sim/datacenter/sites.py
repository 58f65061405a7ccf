"""Sites file: where the job runs, each site's power envelope, and the WAN links between sites.

Two layers, as for run files: `SitesFile` is what the YAML says (extra keys refused, JSON Schema in
schemas/sites.schema.json); `load_sites` turns its quantities into base units with the catalog's unit
system and checks what a schema cannot (power cap within cooling and grid limits, links between known
sites). Every error is one line naming file:line and the field."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from gpustack_compiler.base.errors import InputError
from gpustack_compiler.base.limits import MAX_SIMULATED_DAYS

from .events import to_ns
from .resources import signal_calendars

Quantity = str | float


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class SignalSpec(_Strict):
    kind: Literal["grid", "cooling"] = Field(description="Which limit is lowered: the grid connection's (a "
                                             "curtailment request) or the cooling plant's.")
    start: Quantity = Field(description="Start, as time since the job starts, e.g. '36 hour'.")
    duration: Quantity = Field(description="How long the lower limit holds, e.g. '4 hour'.")
    limit: Quantity = Field(description="The limit in force during the window, as power, e.g. '400 kW'.")


class SiteSpec(_Strict):
    name: str = Field(description="Site name, used by links.")
    accelerator: str = Field(description="Accelerator preset name (catalog/presets), e.g. gpu_h100_sxm.")
    accelerators: int = Field(ge=0, description="Accelerators installed at the site.")
    accelerator_power: Quantity = Field(description="Power per accelerator with its share of the node, e.g. '1 kW'.")
    base_power: Quantity = Field(description="Site power drawn whatever runs (fabric, storage, facility), e.g. '200 kW'.")
    cooling_limit: Quantity = Field(description="Heat the cooling plant can remove, as power.")
    grid_limit: Quantity = Field(description="Power the grid connection can deliver.")
    power_cap: Quantity = Field(description="Operator's power cap; at most min(cooling_limit, grid_limit).")
    storage_bandwidth: Quantity = Field(description="Checkpoint storage bandwidth, e.g. '100 GB/s'.")
    spare_nodes: int | None = Field(None, ge=0, description="Spare nodes held for replacements; absent: unlimited.")
    signals: list[SignalSpec] = Field(default_factory=list, description="Windows in which the grid or cooling "
                                      "limit is lower; windows of one kind at one site may not overlap.")


class Window(_Strict):
    start: Quantity = Field(description="Start, as time since the job starts, e.g. '0 hour'.")
    end: Quantity = Field(description="End, as time since the job starts, e.g. '12 hour'.")


class LinkSpec(_Strict):
    from_: str = Field(alias="from", description="Site at one end.")
    to: str = Field(description="Site at the other end.")
    bandwidth: Quantity = Field(description="Bandwidth in each direction, e.g. '400 Gbit/s'.")
    latency: Quantity = Field(description="One-way latency, e.g. '30 ms'.")
    availability: list[Window] | None = Field(None, description="Windows when the link is up; absent: always up.")


class SitesFile(_Strict):
    description: str = Field(description="What scenario this is (and that its values are choices, not sources).")
    sync_every_steps: int | None = Field(None, ge=1, description="Local steps between cross-site synchronisations "
                                         "(required when the job spans sites).")
    sites: list[SiteSpec] = Field(min_length=1)
    links: list[LinkSpec] = Field(default_factory=list)


# field -> a unit of the dimension it must have
_DIMENSIONS = {"accelerator_power": "W", "base_power": "W", "cooling_limit": "W", "grid_limit": "W",
               "power_cap": "W", "storage_bandwidth": "bit/s", "bandwidth": "bit/s", "latency": "s",
               "start": "s", "end": "s", "duration": "s", "limit": "W"}
# Fields that divide: a zero would leave nothing to divide by.
_POSITIVE = ("accelerator_power", "bandwidth", "storage_bandwidth")
# Every time in a sites file falls within the longest replay, so it is a whole number of nanoseconds.
LONGEST_REPLAY_S = MAX_SIMULATED_DAYS * 86400.0


@dataclass(frozen=True)
class Signal:
    """A window [start, end) in which the site's grid or cooling limit is `limit_w`."""

    kind: str
    start_ns: int
    end_ns: int
    limit_w: float


@dataclass(frozen=True)
class Site:
    name: str
    accelerator: str
    accelerators: int
    accelerator_power_w: float
    base_power_w: float
    cooling_limit_w: float
    grid_limit_w: float
    power_cap_w: float
    storage_bandwidth_bit_s: float
    spare_nodes: int | None
    signals: tuple[Signal, ...] = ()

    @property
    def effective_accelerators(self) -> int:
        """Accelerators the power cap can feed after the site's base load."""
        return self.accelerators_under(self.power_cap_w)

    def accelerators_under(self, cap_w: float) -> int:
        """Accelerators a power cap of `cap_w` can feed after the site's base load."""
        fed = (cap_w - self.base_power_w) / self.accelerator_power_w  # inf when the power is tiny
        return max(0, math.floor(min(self.accelerators, fed)))


@dataclass(frozen=True)
class Link:
    a: str
    b: str
    bandwidth_bit_s: float
    latency_s: float
    windows_s: tuple[tuple[float, float], ...] | None

    @property
    def name(self) -> str:
        return f"link {self.a}-{self.b}"

    def down_ns(self) -> tuple[tuple[int, float], ...]:
        """The windows [start, end) when the link is down: before, between and after its up windows. The
        last is open-ended (end = inf): a link given availability windows is down outside all of them."""
        if self.windows_s is None:
            return ()
        down, edge = [], 0
        for a, b in sorted((to_ns(a), to_ns(b)) for a, b in self.windows_s):
            if a > edge:
                down.append((edge, a))
            edge = max(edge, b)
        return (*down, (edge, math.inf))


@dataclass(frozen=True)
class Sites:
    path: str
    description: str
    sync_every_steps: int | None
    sites: tuple[Site, ...]
    links: tuple[Link, ...]

    def link(self, a: str, b: str) -> Link | None:
        return next((ln for ln in self.links if {ln.a, ln.b} == {a, b}), None)


@dataclass(frozen=True)
class Placement:
    """Where the job's nodes are: (site, nodes) pairs, spares, and the cross-site synchronisation."""

    placed: tuple[tuple[str, int], ...]
    spares: int | None
    sync_every_steps: int | None
    sync_ns: int
    sites: Sites | None = None  # the sites file the placement came from; None: one site without limits

    @property
    def nodes(self) -> int:
        return sum(n for _, n in self.placed)


def single_site(nodes: int) -> Placement:
    return Placement((("site", nodes),), None, None, 0)


def sync_hops(sites: Sites, in_use: list[str], sync_bits: float) -> tuple[tuple[Link, int], ...]:
    """The hops of a cross-site synchronisation, each with its transfer time in ns. It passes the weights
    along the chain of the sites in use (in file order) and waits for the slowest hop."""
    hops = []
    for a, b in zip(in_use, in_use[1:]):
        link = sites.link(a, b)
        if link is None:
            raise InputError(f"{sites.path}: links: the job spans {a} and {b} but no link joins them")
        seconds = link.latency_s + sync_bits / link.bandwidth_bit_s
        if not seconds <= LONGEST_REPLAY_S:
            raise InputError(f"{sites.path}: links: a synchronisation over {link.name} takes {seconds:,.6g} s "
                             f"({sync_bits:,.6g} bit at {link.bandwidth_bit_s:,.6g} bit/s after "
                             f"{link.latency_s:,.6g} s), longer than the longest replay ({MAX_SIMULATED_DAYS:,} days)")
        hops.append((link, to_ns(seconds)))
    return tuple(hops)


def storage_write_s(sites: Sites, placement: Placement, nodes: int, checkpoint_bits: float) -> float:
    """The longest time a site's checkpoint storage takes to absorb its share of one checkpoint: every node of
    the job at a site writes its part at once, so they contend for the site's storage_bandwidth."""
    slowest = 0.0
    for name, n in placement.placed:
        site = next(s for s in sites.sites if s.name == name)
        seconds = checkpoint_bits * n / nodes / site.storage_bandwidth_bit_s
        if not seconds <= LONGEST_REPLAY_S:
            raise InputError(f"{sites.path}: sites: {name}: a checkpoint write takes {seconds:,.6g} s at its "
                             f"storage_bandwidth, longer than the longest replay ({MAX_SIMULATED_DAYS:,} days)")
        slowest = max(slowest, seconds)
    return slowest


def load_sites(path: Path, units, presets: set[str] | None = None) -> Sites:
    """Read and check a sites file; `units` is the catalog's UnitSystem."""
    from gpustack_compiler.base.documents import field_path, read_mapping, validate
    from gpustack_compiler.base.yaml_lines import line_at
    from gpustack_compiler.language.models import parse_quantity

    data = read_mapping(path, "sites file")
    spec = validate(SitesFile, data, str(path))

    def fail(loc: tuple, message: str):
        return InputError(f"{path}:{line_at(data, loc)}: {field_path(loc)}: {message}")

    def base(value: Quantity, loc: tuple) -> float:
        want = units.parse(_DIMENSIONS[loc[-1]])
        try:
            q = parse_quantity(value, _DIMENSIONS[loc[-1]])
            unit = units.parse(q.units)
        except ValueError as exc:
            raise fail(loc, str(exc)) from None
        if unit.dim != want.dim:
            raise fail(loc, f"{value!r} is not a {_DIMENSIONS[loc[-1]]} quantity")
        if not math.isfinite(q.value) or q.value < 0:
            raise fail(loc, f"{value!r} is negative")
        v = q.value * unit.scale
        if loc[-1] in _POSITIVE and not v > 0:
            raise fail(loc, f"{value!r} is not positive")
        if not math.isfinite(v):
            raise fail(loc, f"{value!r} is not a finite number")
        if _DIMENSIONS[loc[-1]] == "s" and v > LONGEST_REPLAY_S:
            raise fail(loc, f"{value!r} is beyond the longest replay ({MAX_SIMULATED_DAYS:,} days)")
        return v

    sites = []
    for i, s in enumerate(spec.sites):
        loc = ("sites", i)
        if presets is not None and s.accelerator not in presets:
            raise fail(loc + ("accelerator",), f"unknown preset {s.accelerator!r}")
        values = {f: base(getattr(s, f), loc + (f,)) for f in ("accelerator_power", "base_power", "cooling_limit",
                                                               "grid_limit", "power_cap", "storage_bandwidth")}
        if values["power_cap"] > min(values["cooling_limit"], values["grid_limit"]):
            limit = "grid_limit" if values["grid_limit"] <= values["cooling_limit"] else "cooling_limit"
            raise fail(loc + ("power_cap",), f"{s.power_cap!r} is above {limit} {getattr(s, limit)!r}")
        signals = []
        for j, sig in enumerate(s.signals):
            sloc = loc + ("signals", j)
            start, duration = base(sig.start, sloc + ("start",)), base(sig.duration, sloc + ("duration",))
            if not duration > 0:
                raise fail(sloc + ("duration",), "must be positive")
            signals.append(Signal(sig.kind, to_ns(start), to_ns(start + duration), base(sig.limit, sloc + ("limit",))))
        sites.append(Site(s.name, s.accelerator, s.accelerators, values["accelerator_power"], values["base_power"],
                          values["cooling_limit"], values["grid_limit"], values["power_cap"],
                          values["storage_bandwidth"], s.spare_nodes, tuple(signals)))
        try:
            signal_calendars(sites[-1])
        except InputError as exc:
            raise fail(loc + ("signals",), exc.message) from None
    names = [s.name for s in sites]
    for i, name in enumerate(names):
        if name in names[:i]:
            raise fail(("sites", i, "name"), f"site {name!r} is defined twice")
    links = []
    for i, ln in enumerate(spec.links):
        loc = ("links", i)
        for end, field_name in ((ln.from_, "from"), (ln.to, "to")):
            if end not in names:
                raise fail(loc + (field_name,), f"unknown site {end!r} (sites: {', '.join(names)})")
        windows = None
        if ln.availability is not None:
            windows = tuple((base(w.start, loc + ("availability", j, "start")),
                             base(w.end, loc + ("availability", j, "end"))) for j, w in enumerate(ln.availability))
            for j, (start, end) in enumerate(windows):
                if end <= start:
                    raise fail(loc + ("availability", j, "end"), "a window ends before it starts")
        links.append(Link(ln.from_, ln.to, base(ln.bandwidth, loc + ("bandwidth",)),
                          base(ln.latency, loc + ("latency",)), windows))
    return Sites(str(path), spec.description, spec.sync_every_steps, tuple(sites), tuple(links))


def place(sites: Sites, nodes: int, gpus_per_node: int, sync_bits: float) -> Placement:
    """Fill the sites in file order with the job's nodes, as many as each site's power cap feeds."""
    placed, left = [], nodes
    for site in sites.sites:
        take = min(left, site.effective_accelerators // gpus_per_node)
        if take:
            placed.append((site.name, take))
            left -= take
    if left:
        raise InputError(f"{sites.path}: sites: the power caps feed {nodes - left} nodes of {gpus_per_node} "
                        f"accelerators, the job needs {nodes}")
    used = {name for name, _ in placed}
    spares = None
    if any(s.spare_nodes is not None for s in sites.sites if s.name in used):
        spares = sum(s.spare_nodes or 0 for s in sites.sites if s.name in used)
    if len(placed) == 1:
        return Placement(tuple(placed), spares, None, 0, sites)
    if sites.sync_every_steps is None:
        raise InputError(f"{sites.path}: sync_every_steps: required, the job spans {len(placed)} sites")
    stall = max(d for _, d in sync_hops(sites, [name for name, _ in placed], sync_bits))
    return Placement(tuple(placed), spares, sites.sync_every_steps, stall, sites)


def _register_schema() -> None:
    # The compiler owns `gpustack schema` but may not import the engine: the engine registers its file.
    from gpustack_compiler.build.schema import SCHEMA_FILES

    SCHEMA_FILES.setdefault("sites.schema.json", SitesFile)


_register_schema()
