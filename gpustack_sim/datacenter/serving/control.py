"""What a serving controller may see and do. A controller sees only a `FleetObservation`, a snapshot of what
an operator's telemetry reports at a control tick (per-replica queue, batch and KV-cache use, per-site
power over the last tick, the grid's requests), never the simulator, its request trace or its random
generators; it answers with actions applied at that tick."""

from __future__ import annotations

from dataclasses import dataclass, field

ROUTING = ("round_robin", "least_loaded", "kv_aware")


@dataclass(frozen=True)
class GridEvent:
    """A demand-response dispatch: from `start_s` to `end_s` the site is asked to draw `bid_share` less than
    it drew in the minute before the signal."""

    site: int
    start_s: float
    end_s: float
    bid_share: float


@dataclass(frozen=True)
class FleetObservation:
    time_s: float
    load: tuple[int, ...]  # requests queued or running per replica
    kv_share: tuple[float, ...]
    replica_site: tuple[int, ...]
    enabled: tuple[bool, ...]
    site_power_w: tuple[float, ...]  # mean facility power of each site over the last tick
    site_power_before_w: tuple[float, ...]  # mean over the last minute before the latest grid signal per site
    grid_bids: tuple[tuple[int, float], ...]  # active dispatches: (site, watts to shed)
    site_cap_w: tuple[float, ...]  # per-GPU board power cap in force at each site (the board limit if none)


@dataclass(frozen=True)
class SetCap:
    site: int
    watts_per_gpu: float | None  # None lifts the cap


@dataclass(frozen=True)
class MoveRequests:
    """Move up to `count` requests from one replica to another: queued ones first (free), then decoding
    ones with their KV cache over the fabric (or the WAN between sites)."""

    source: int
    target: int
    count: int
    decoding: bool = True


@dataclass(frozen=True)
class SetShedding:
    site: int
    on: bool


@dataclass(frozen=True)
class AvoidSite:
    """Route no new requests to the site (they go to the other sites)."""

    site: int
    on: bool


@dataclass(frozen=True)
class SetEnabled:
    replica: int
    on: bool


Action = SetCap | MoveRequests | SetShedding | AvoidSite | SetEnabled


@dataclass
class Controller:
    """A configurable controller: request migration between replicas (rebalancing), autoscaling (draining
    idle replicas), and the grid mechanisms it may use (capping, shedding, migrating away)."""

    migrate: bool = False
    autoscale: bool = False
    grid: frozenset[str] = field(default_factory=frozenset)  # subset of {"cap", "shed", "migrate"}
    name: str = "static"
    per_replica: int = 32  # the autoscaler's target of requests per enabled replica
    # Kubernetes' default downscale stabilization window (--horizontal-pod-autoscaler-downscale-stabilization).
    stabilization_s: float = 300.0
    _caps: dict[int, float] = field(default_factory=dict)
    _loads: list[tuple[float, int]] = field(default_factory=list)

    def fresh(self) -> Controller:
        """The same controller with none of the state it has learnt (for the next replication)."""
        return Controller(self.migrate, self.autoscale, self.grid, self.name, self.per_replica, self.stabilization_s)

    def decide(self, obs: FleetObservation) -> list[Action]:
        acts: list[Action] = []
        bids = dict(obs.grid_bids)
        if self.autoscale:
            acts += self._autoscale(obs)
        if self.migrate:
            acts += self._rebalance(obs, exclude=set())
        for site in range(len(obs.site_power_w)):
            bid = bids.get(site)
            active = bid is not None
            if "shed" in self.grid:
                acts.append(SetShedding(site, active))
            if "migrate" in self.grid:
                acts.append(AvoidSite(site, active))
                if active:
                    acts += self._evacuate(obs, site)
            if "cap" in self.grid:
                acts += self._cap(obs, site, bid)
        return acts

    def _cap(self, obs: FleetObservation, site: int, bid: float | None) -> list[Action]:
        """Feedback on the site's metered power: move the per-GPU cap by the share the site is off target."""
        if bid is None:
            if site in self._caps:
                del self._caps[site]
                return [SetCap(site, None)]
            return []
        target = obs.site_power_before_w[site] - bid
        now = obs.site_power_w[site]
        cap = self._caps.get(site, obs.site_cap_w[site])
        if now > 0:
            cap = max(1.0, cap * min(1.5, max(0.5, target / now)))
        self._caps[site] = cap
        return [SetCap(site, cap)]

    def _autoscale(self, obs: FleetObservation) -> list[Action]:
        """Keep enough replicas enabled for `per_replica` requests each plus one spare, for the largest load
        seen over the stabilization window: scale up at once, down only once the window has passed (the
        Kubernetes horizontal autoscaler's behaviour). A drained replica finishes its requests and takes no
        new ones."""
        n = len(obs.load)
        self._loads.append((obs.time_s, sum(obs.load)))
        while self._loads and self._loads[0][0] < obs.time_s - self.stabilization_s:
            self._loads.pop(0)
        peak = max(load for _, load in self._loads)
        want = max(1, min(n, -(-peak // self.per_replica) + 1))
        on = [i for i in range(n) if obs.enabled[i]]
        off = [i for i in range(n) if not obs.enabled[i]]
        if len(on) < want:
            return [SetEnabled(i, True) for i in off[:want - len(on)]]
        if obs.time_s < self.stabilization_s:
            return []  # no scale-down before a whole window of loads has been seen
        idle = sorted((obs.load[i], i) for i in on)
        return [SetEnabled(i, False) for _, i in idle[:len(on) - want]]

    def _rebalance(self, obs: FleetObservation, exclude: set[int]) -> list[Action]:
        """Move requests from replicas with the most over the mean to those with the least, one site at a time."""
        acts = []
        sites = sorted(set(obs.replica_site))
        for s in sites:
            idx = [i for i in range(len(obs.load)) if obs.replica_site[i] == s and obs.enabled[i] and i not in exclude]
            if len(idx) < 2:
                continue
            mean = sum(obs.load[i] for i in idx) / len(idx)
            heavy = sorted(idx, key=lambda i: (-obs.load[i], i))
            light = sorted(idx, key=lambda i: (obs.load[i] + 8 * obs.kv_share[i], i))
            for h, l in zip(heavy, light):
                surplus = int(min(obs.load[h] - mean, mean - obs.load[l]))
                if h == l or surplus < 2 or obs.kv_share[l] > 0.8:
                    break
                acts.append(MoveRequests(h, l, surplus // 2))
        return acts

    def _evacuate(self, obs: FleetObservation, site: int) -> list[Action]:
        """Send the site's queued and decoding requests to the other sites' least loaded replicas."""
        others = [i for i in range(len(obs.load)) if obs.replica_site[i] != site and obs.enabled[i]]
        if not others:
            return []
        acts = []
        k = 0
        for i in range(len(obs.load)):
            if obs.replica_site[i] == site and obs.load[i] > 0:
                target = sorted(others, key=lambda j: (obs.load[j] + 8 * obs.kv_share[j], j))[k % len(others)]
                k += 1
                acts.append(MoveRequests(i, target, obs.load[i]))
        return acts
