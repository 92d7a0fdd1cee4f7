"""Bounded per-project memory for the gateway: sequence series and announced projects.

A flood of new project ids must not grow a gateway without bound, so both maps keep at
most ``max_tracked`` projects and forget the least recently used one past it. Forgetting
an announcement is harmless (the project is announced again). Forgetting a sequence
counter is not, on its own: the audit numbers each series (gateway_id, project_id) 1..N
contiguously, so a project that comes back must not start at 1 again under the same
gateway id. It gets a new series instead: ``{gateway_id}~{generation}``, where the
generation is the number of evictions this tracker had made when the project came back.
That number only grows, and the project's own eviction raised it past the generation it
had, so a (series, project, sequence) triple is never handed out twice.

These two are the only mutable structures in core: an immutable map copied on every
request would cost O(max_tracked) per request. They hold no clock and do no I/O.
"""

from __future__ import annotations

from collections import OrderedDict

__all__ = ["RecentSet", "SeriesCounters", "series_id"]


def series_id(gateway_id: str, generation: int) -> str:
    """The gateway id a series is published under: the gateway's own for generation 0
    (every project's first series), ``{gateway_id}~{generation}`` after an eviction."""
    return gateway_id if generation == 0 else f"{gateway_id}~{generation}"


class SeriesCounters:
    """Per-project sequence counters of one gateway process, at most ``max_tracked`` of
    them (least recently used evicted first)."""

    def __init__(self, gateway_id: str, max_tracked: int) -> None:
        if max_tracked < 1:
            raise ValueError(f"max_tracked must be at least 1, not {max_tracked}")
        self.gateway_id = gateway_id
        self.max_tracked = max_tracked
        self.evictions = 0
        # project -> (generation, next sequence), least recently used first
        self._counters: OrderedDict[str, tuple[int, int]] = OrderedDict()

    def reserve(self, project_id: str, count: int) -> tuple[str, int]:
        """Reserve ``count`` sequences of ``project_id``'s series: (the series' gateway
        id, the first sequence). A project not tracked (new, or evicted) starts a new
        series at 1."""
        if count < 1:
            raise ValueError(f"count must be at least 1, not {count}")
        entry = self._counters.pop(project_id, None)
        generation, first = (self.evictions, 1) if entry is None else entry
        self._counters[project_id] = (generation, first + count)
        while len(self._counters) > self.max_tracked:
            self._counters.popitem(last=False)
            self.evictions += 1
        return series_id(self.gateway_id, generation), first

    def __len__(self) -> int:
        return len(self._counters)

    def __contains__(self, project_id: object) -> bool:
        return project_id in self._counters


class RecentSet:
    """A set of at most ``max_size`` strings, each with the time it was (last) added;
    adding past the bound forgets the least recently added one. Membership tests do not
    refresh."""

    def __init__(self, max_size: int) -> None:
        if max_size < 1:
            raise ValueError(f"max_size must be at least 1, not {max_size}")
        self.max_size = max_size
        self._items: OrderedDict[str, float] = OrderedDict()

    def add(self, item: str, at: float = 0.0) -> None:
        """Add (or re-add) ``item``, added ``at`` (the caller's clock)."""
        self._items.pop(item, None)
        self._items[item] = at
        while len(self._items) > self.max_size:
            self._items.popitem(last=False)

    def added_at(self, item: str) -> float | None:
        """When ``item`` was last added, if it is in the set."""
        return self._items.get(item)

    def discard(self, item: str) -> None:
        self._items.pop(item, None)

    def __contains__(self, item: object) -> bool:
        return item in self._items

    def __len__(self) -> int:
        return len(self._items)
