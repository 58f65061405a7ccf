"""Simulation time and the event order.

Time is an integer count of nanoseconds, so sums of durations are exact and replays are
bit-identical on any machine. Events are ordered by (time_ns, priority, kind, seq): at one instant a
failure is handled before the work it interrupts completes, and the sequence number (owned by each
simulation's queue, never by a class or module) breaks the remaining ties in insertion order."""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from enum import IntEnum

NS_PER_S = 1_000_000_000


def to_ns(seconds: float) -> int:
    return round(seconds * NS_PER_S)


def to_s(ns: int) -> float:
    return ns / NS_PER_S


class EventKind(IntEnum):
    """Every kind the event log can hold; the value is the tie-break at equal time and priority."""

    FAILURE = 0
    DETECTION = 1
    RESTART = 2
    RECOVERY = 3
    MEMBERSHIP_CHANGE = 4
    GRID_SIGNAL = 5
    COOLING_SIGNAL = 6
    CHECKPOINT_WRITE = 7
    CHECKPOINT_DRAIN = 8
    STATE_TRANSFER = 9
    COLLECTIVE = 10
    COMPUTE = 11


class Priority(IntEnum):
    """What happens first at one instant: the world (failures, signals) before the job's own progress."""

    WORLD = 0
    JOB = 1


@dataclass(frozen=True, order=True)
class Event:
    time_ns: int
    priority: int
    kind: int
    seq: int
    payload: tuple = field(default=(), compare=False)


class EventQueue:
    """A heap of events with its own sequence counter (one per simulation instance)."""

    def __init__(self) -> None:
        # Plain tuples in the heap: comparing them is several times cheaper than comparing dataclasses.
        self._heap: list[tuple] = []
        self._seq = 0

    def next_seq(self) -> int:
        """The next sequence number; event-log rows take theirs from the same counter as queued events."""
        seq = self._seq
        self._seq += 1
        return seq

    def push(self, time_ns: int, priority: Priority, kind: EventKind, payload: tuple = ()) -> Event:
        event = Event(time_ns, int(priority), int(kind), self.next_seq(), payload)
        heapq.heappush(self._heap, (event.time_ns, event.priority, event.kind, event.seq, payload))
        return event

    def pop(self) -> Event:
        return Event(*heapq.heappop(self._heap))

    def peek_time(self) -> int | None:
        return self._heap[0][0] if self._heap else None

    def __len__(self) -> int:
        return len(self._heap)
