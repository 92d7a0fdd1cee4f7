"""When a handler's buffer becomes a file, and how long it waits after a failed write.

Pure: the caller passes the buffer's size, the age of its oldest row and the clock reading.
Kafka Connect's S3 sink and Flink's FileSink roll the same way: by record count, by size
and by age, whichever comes first. Large files are the point (readers pay per file); the
age bound keeps latency and the ack deadline of buffered messages in check.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from core.errors import ShoalError

__all__ = ["InvalidRollPolicyError", "RollPolicy", "RollReason", "roll_reason"]


class InvalidRollPolicyError(ShoalError, ValueError):
    """A roll policy that could never roll, or would roll on every row."""


class RollReason(StrEnum):
    ROWS = "rows"  # the buffer holds max_rows rows
    BYTES = "bytes"  # the buffer holds max_bytes payload bytes
    AGE = "age"  # the oldest buffered row waited max_age seconds
    HANDOVER = "handover"  # a partition's first rows since it was claimed waited handover_age
    IDLE = "idle"  # nothing was added for a while: the stream went quiet
    DRAIN = "drain"  # a partition is being handed over (or the handler stops): land now


@dataclass(frozen=True, slots=True)
class RollPolicy:
    """Roll when the buffer reaches ``max_rows`` rows, ``max_bytes`` bytes, or when its
    oldest row is ``max_age`` seconds old, whichever comes first.

    A buffer holding a partition's first rows after its claim, fetched within
    ``handover_age`` of it (the backlog of a partition that moved: a handler joined, or
    took over from one that left or died), rolls after ``handover_age`` instead: data of a
    moved partition shows up within a second, at the cost of one small file per handover.

    And a buffer to which nothing was added for ``idle_gaps`` times the usual gap between
    additions (and at least ``idle_age`` seconds) rolls: the stream went quiet (a burst
    ended), so waiting longer only delays its rows. A steady stream, even a slow or bursty
    one, keeps its usual gaps and its files stay large."""

    max_rows: int = 10_000
    max_bytes: int = 64 * 1024 * 1024
    max_age: float = 20.0
    handover_age: float = 0.2
    idle_age: float = 1.0
    idle_gaps: float = 20.0

    def __post_init__(self) -> None:
        if self.max_rows < 1:
            raise InvalidRollPolicyError(f"max_rows must be at least 1, not {self.max_rows}")
        if self.max_bytes < 1:
            raise InvalidRollPolicyError(f"max_bytes must be at least 1, not {self.max_bytes}")
        if not self.max_age > 0:
            raise InvalidRollPolicyError(f"max_age must be above 0 s, not {self.max_age}")
        if not self.handover_age > 0:
            raise InvalidRollPolicyError(f"handover_age must be above 0 s, not {self.handover_age}")
        if not self.idle_age > 0:
            raise InvalidRollPolicyError(f"idle_age must be above 0 s, not {self.idle_age}")
        if not self.idle_gaps >= 1:
            raise InvalidRollPolicyError(f"idle_gaps must be at least 1, not {self.idle_gaps}")

    def quiet_after(self, usual_gap: float) -> float:
        """Seconds without an addition after which a buffer counts as quiet, when
        additions usually come ``usual_gap`` seconds apart."""
        return max(self.idle_age, self.idle_gaps * usual_gap)

    def due_at(
        self,
        oldest: float,
        *,
        newest: float | None = None,
        usual_gap: float = 0.0,
        handover: bool = False,
    ) -> float:
        """When a buffer whose oldest row arrived at ``oldest`` (and newest at ``newest``)
        rolls by age, if nothing else comes first."""
        due = oldest + (min(self.max_age, self.handover_age) if handover else self.max_age)
        return due if newest is None else min(due, newest + self.quiet_after(usual_gap))


def roll_reason(
    policy: RollPolicy,
    *,
    rows: int,
    size: int,
    oldest: float | None,
    now: float,
    newest: float | None = None,
    usual_gap: float = 0.0,
    handover: bool = False,
) -> RollReason | None:
    """Why a buffer of ``rows`` rows and ``size`` bytes, whose oldest row arrived at
    ``oldest`` and newest at ``newest`` (additions usually ``usual_gap`` seconds apart;
    ``handover``: it holds a moved partition's first rows), must roll at ``now``; None while
    it may keep filling (or is empty)."""
    if rows == 0 or oldest is None:
        return None
    if rows >= policy.max_rows:
        return RollReason.ROWS
    if size >= policy.max_bytes:
        return RollReason.BYTES
    if now >= policy.due_at(oldest):
        return RollReason.AGE
    if handover and now >= policy.due_at(oldest, handover=True):
        return RollReason.HANDOVER
    if newest is not None and now >= newest + policy.quiet_after(usual_gap):
        return RollReason.IDLE
    return None
