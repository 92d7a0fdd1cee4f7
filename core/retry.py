"""Retrying, once for every loop and every message: how long to wait before trying again
(``retry_delay``), when a message has had its deliveries (``deliveries_exhausted``), and
which of its deliveries were shoal's doing rather than the message's (``Excusals``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, TypeAlias

__all__ = ["MAX_EXCUSALS", "DeadLetterReason", "Excusals", "deliveries_exhausted", "retry_delay"]

MAX_EXCUSALS = 64
"""Spans an ``Excusals`` keeps: past it the oldest goes (its deliveries count again)."""

DeadLetterReason: TypeAlias = Literal["unprocessable", "max_deliver"]
"""Why a message went to the dead-letter path: it cannot be processed, or it came back
after ``max_deliver`` deliveries that never settled it (a message that crashes or stalls
every consumer it reaches)."""


def retry_delay(failures: int, *, base: float, cap: float) -> float:
    """Exponential backoff after ``failures`` consecutive failures (1 -> ``base``),
    doubling up to ``cap``; 0 before any failure. An infrastructure failure waits; it
    never spends a message's delivery attempts."""
    if failures < 1:
        return 0.0
    if base <= 0 or cap < base:
        raise ValueError(f"need 0 < base <= cap, got base={base} cap={cap}")
    # Bounded exponent: 2**1000 would overflow a float long before cap matters.
    return min(cap, base * 2.0 ** min(failures - 1, 62))


def deliveries_exhausted(attempt: int, max_deliver: int) -> bool:
    """True for a delivery whose ``attempt`` comes after ``max_deliver`` deliveries that
    never settled the message: the consumer dead-letters it (reason ``max_deliver``)
    instead of processing it again. The broker only counts and redelivers; this rule is
    the one retry budget, applied above every transport."""
    if max_deliver < 1:
        raise ValueError(f"max_deliver must be at least 1, got {max_deliver}")
    return attempt > max_deliver


@dataclass(frozen=True, slots=True)
class Excusals:
    """The redeliveries of one partition's log that shoal caused itself, which the retry
    budget does not count: a subscription closed on purpose (a handoff, a lost lease, a
    partition opened again) gives back what it was delivered and had not settled, and the
    broker counts another delivery of each when it hands them out again.

    Each close that gives deliveries back adds one span ``(low, high)`` of positions, from
    the lowest to the highest it was delivered: each message it gave back is delivered
    once more than its own failures explain, and is excused once. A span may also cover
    positions that were settled (never delivered again: no matter) or waiting for their
    redelivery after an earlier close (excused once too often: one more try). A crash
    closes nothing, so the redeliveries it causes count: a message that kills its
    consumer is what the budget is for. At most ``MAX_EXCUSALS`` spans are kept:
    dropping the oldest only counts more deliveries, never fewer."""

    spans: tuple[tuple[int, int], ...] = ()

    def excused(self, position: int) -> int:
        """How many of the deliveries of ``position`` shoal gave back itself."""
        return sum(1 for low, high in self.spans if low <= position <= high)

    def attempt(self, delivered: int, position: int) -> int:
        """The attempt the retry budget counts for the ``delivered``-th delivery of
        ``position``: the deliveries less those excused, and never below 1 (a span that
        excused a delivery that did not happen cannot make a delivery free)."""
        if delivered <= 1 or not self.spans:  # nothing to take off: the usual case, per message
            return max(1, delivered)
        return max(1, delivered - self.excused(position))

    def excusing(self, low: int, high: int) -> Excusals:
        """With one more close that gave back positions ``low`` to ``high`` (none when
        ``low > high``)."""
        if low > high:
            return self
        return Excusals((*self.spans, (low, high))[-MAX_EXCUSALS:])

    def above(self, floor: int) -> Excusals:
        """Without the spans wholly below ``floor``: every message there is settled and
        never delivered again (``Subscription.acked_below``)."""
        kept = tuple(span for span in self.spans if span[1] >= floor)
        return self if len(kept) == len(self.spans) else Excusals(kept)
