"""``Settlements``: per-message settlement on top of Kafka's one offset per partition.

Kafka keeps one committed offset per (group, partition); shoal's port settles messages one
by one, in any order. The settlements bridges the two:

- ``base`` is the committed offset: every offset below it is settled (acked, terminated,
  dead-lettered, skipped as a duplicate, or a gap in the log), and it is the lowest
  offset that is not;
- ``settled`` holds the settled offsets above ``base`` (acked out of order);
- ``counts`` holds how many times an offset in [base, delivered_until) was delivered,
  when that is not 1 (offsets below ``delivered_until`` were delivered at least once),
  less the deliveries excused: a subscription closed on purpose gives back what it holds
  and takes one delivery off each (``excuse``). That is Kafka's dialect of
  ``core.retry.Excusals``: these counts are shoal's own, kept per offset, so the excusal
  is exact instead of a span of positions.

The whole settlements is committed with the offset, in the commit's metadata string (JSON,
offsets relative to ``base``), so the next subscriber of the partition (a handoff, or a
restart after a crash) skips what was acked out of order and keeps counting deliveries
(the attempts the consumer's retry budget counts). The broker caps metadata at
``offset.metadata.max.bytes`` (4096 by default); a settlements too big for ``limit`` drops
the out-of-order acks first (those messages are then redelivered: at-least-once still
holds), then the highest counts.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Iterator

__all__ = ["METADATA_LIMIT", "Settlements"]

log = logging.getLogger("shoal.adapters.kafka")

METADATA_LIMIT = 4000  # below the broker's default offset.metadata.max.bytes (4096)
_VERSION = 1


def _ranges(offsets: Iterable[int]) -> Iterator[tuple[int, int]]:
    """Sorted offsets as (start, length) runs."""
    start = prev = None
    for o in sorted(offsets):
        if start is None or prev is None:
            start = prev = o
        elif o == prev + 1:
            prev = o
        else:
            yield start, prev - start + 1
            start = prev = o
    if start is not None and prev is not None:
        yield start, prev - start + 1


class Settlements:
    """The settlement state of one partition (see the module docstring). Not thread-safe;
    one event loop task at a time, no awaits inside."""

    __slots__ = ("base", "counts", "delivered_until", "read_to", "settled", "truncated")

    def __init__(self, base: int) -> None:
        self.base = base
        self.settled: set[int] = set()
        self.counts: dict[int, int] = {}
        self.delivered_until = base
        self.read_to = base  # the next offset expected from the log
        self.truncated = False  # the last metadata() had to drop something

    # -- restore / persist -----------------------------------------------------------

    @classmethod
    def restore(cls, base: int, metadata: str | None) -> Settlements:
        """The settlements committed as (``base``, ``metadata``); unreadable metadata (another
        client's, or none) gives a plain settlements at ``base``."""
        settlements = cls(base)
        if not metadata:
            return settlements
        try:
            state = json.loads(metadata)
            if not isinstance(state, dict) or state.get("v") != _VERSION:
                return settlements
            d = int(state.get("d", 0))
            counts = {base + int(rel): int(n) for rel, n in state.get("a", [])}
            settled = {
                base + int(rel) + i for rel, length in state.get("k", []) for i in range(length)
            }
        except (ValueError, TypeError):
            log.warning("ignoring unreadable offset metadata %.80r", metadata)
            return settlements
        settlements.delivered_until = base + max(d, 0)
        settlements.counts = {o: n for o, n in counts.items() if o >= base and n >= 0}
        settlements.settled = {o for o in settled if o > base}
        return settlements

    def metadata(self, limit: int = METADATA_LIMIT, *, reserve_to: int = 0) -> str:
        """The settlements as commit metadata (JSON, offsets relative to ``base``), at most
        ``limit`` bytes: out-of-order acks are dropped first, then counts. ``reserve_to``
        records every offset below it as delivered once already (a reservation ahead of
        ``delivered_until``, so first deliveries need no commit of their own)."""
        b = self.base
        counts = sorted((o - b, n) for o, n in self.counts.items() if o >= b)
        settled = [(s - b, n) for s, n in _ranges(o for o in self.settled if o > b)]
        delivered = max(self.delivered_until, reserve_to)
        state: dict[str, object] = {"v": _VERSION, "d": max(delivered - b, 0)}
        if counts:
            state["a"] = counts
        if settled:
            state["k"] = settled
        text = json.dumps(state, separators=(",", ":"))
        self.truncated = False
        if len(text.encode()) <= limit:
            return text
        self.truncated = True
        state.pop("k", None)
        while counts:
            text = json.dumps(state, separators=(",", ":"))
            if len(text.encode()) <= limit:
                return text
            counts = counts[: len(counts) * 3 // 4]
            state["a"] = counts
        state.pop("a", None)
        return json.dumps(state, separators=(",", ":"))

    # -- changes -----------------------------------------------------------------------

    def count(self, offset: int) -> int:
        """How many times ``offset`` was delivered so far (by anyone, as recorded)."""
        if offset in self.counts:
            return self.counts[offset]
        return 1 if offset < self.delivered_until else 0

    def delivered(self, offset: int) -> int:
        """Record one more delivery of ``offset``; return the new count (the attempt)."""
        n = self.count(offset) + 1
        if n == 1:
            self.counts.pop(offset, None)
        else:
            self.counts[offset] = n
        if offset >= self.delivered_until:
            # offsets skipped on the way (gaps, duplicates) are settled already; none of
            # the not-yet-delivered ones are below offset: the log is read in order
            for o in range(self.delivered_until, offset):
                if o not in self.settled and o >= self.base:
                    self.counts.setdefault(o, 0)
            self.delivered_until = offset + 1
        return n

    def excuse(self, offset: int) -> None:
        """Take one delivery of ``offset`` off its count: a close gave it back."""
        n = max(self.count(offset) - 1, 0)
        if n == 1:
            self.counts.pop(offset, None)
        else:
            self.counts[offset] = n

    def settle(self, offset: int) -> None:
        """Mark ``offset`` settled; the commit point moves over every settled offset."""
        self.counts.pop(offset, None)
        if offset < self.base:
            return
        self.settled.add(offset)
        while self.base in self.settled:
            self.settled.discard(self.base)
            self.base += 1
        self.delivered_until = max(self.delivered_until, self.base)
        self.read_to = max(self.read_to, self.base)

    def is_settled(self, offset: int) -> bool:
        return offset < self.base or offset in self.settled

    def pending(self) -> int:
        """Offsets read (or known) and not settled: read_to - base - settled above base."""
        return max(self.read_to - self.base - len(self.settled), 0)
