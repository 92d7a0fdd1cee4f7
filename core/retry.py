"""How long to wait before trying again: one backoff rule for every retry loop."""

from __future__ import annotations

__all__ = ["retry_delay"]


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
