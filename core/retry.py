"""Retrying, once for every loop and every message: how long to wait before trying again
(``retry_delay``), and when a message has had its deliveries (``deliveries_exhausted``)."""

from __future__ import annotations

from typing import Literal, TypeAlias

__all__ = ["DeadLetterReason", "deliveries_exhausted", "retry_delay"]

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
