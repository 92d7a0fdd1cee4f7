"""Replay windows: which stored messages of a partition ``shoal replay`` reads again.

A window has a start bound and an optional end bound, each either a position in the
partition's log (NATS stream sequence, Kafka offset) or a time (epoch seconds). A stored
message is inside when it is at or after the start and before the end: ``position >=
start`` / ``stored_at >= start``, ``position < end`` / ``stored_at < end``, where
``stored_at`` is the *broker's* timestamp of the message (NATS: the time the server stored
it; Kafka: the record's timestamp), never the gateway's ``received_at``. Without an end
bound the window ends at the log's last message when reading starts.

The operator's spelling of a bound (``--from``/``--to``) is parsed here: an integer is a
position, ``-10m`` (``s``, ``m``, ``h``, ``d``) is that long before ``now``, anything else
must be an ISO-8601 time (no zone: UTC). ``now`` is the caller's clock, passed in.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import Enum

from core.errors import ShoalError
from core.messages import Envelope

__all__ = [
    "AtPosition",
    "AtTime",
    "BadWindowError",
    "Bound",
    "NotReplayableError",
    "Place",
    "StoredMessage",
    "Window",
    "parse_bound",
    "window_of",
]

_RELATIVE = re.compile(r"^-([0-9]+(?:\.[0-9]+)?)([smhd])$")
_UNIT_SECONDS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


class BadWindowError(ShoalError, ValueError):
    """A bound that cannot be read, or an end before the start; nothing was read."""


class NotReplayableError(ShoalError):
    """The broker does not keep consumed messages (a work-queue stream), so no history
    can be read."""


@dataclass(frozen=True, slots=True)
class AtPosition:
    """A place in the partition's log: a NATS stream sequence or a Kafka offset."""

    position: int


@dataclass(frozen=True, slots=True)
class AtTime:
    """A broker time, in seconds since the epoch."""

    epoch: float


Bound = AtPosition | AtTime


class Place(Enum):
    """Where a stored message lies relative to a window, read in log order."""

    BEFORE = "before"  # skip it and read on
    INSIDE = "inside"
    AFTER = "after"  # stop: the window is over


@dataclass(frozen=True, slots=True)
class StoredMessage:
    """One message as the broker stored it: its envelope, its position in the partition's
    log and the broker's timestamp (epoch seconds)."""

    envelope: Envelope
    position: int
    stored_at: float


@dataclass(frozen=True, slots=True)
class Window:
    """``[start, end)`` over positions or broker times (see the module docstring)."""

    start: Bound
    end: Bound | None = None

    def place(self, position: int, stored_at: float) -> Place:
        """Where the message at ``position`` stored at ``stored_at`` lies. Reading stops at
        the first message past the end: broker timestamps are taken to grow along the log
        (the NATS server stamps each message as it stores it; Kafka records carry their
        producer's time, which is in order for one producer with a steady clock)."""
        if self.end is not None and not _before(self.end, position, stored_at):
            return Place.AFTER
        if _before(self.start, position, stored_at):
            return Place.BEFORE
        return Place.INSIDE

    def contains(self, position: int, stored_at: float) -> bool:
        return self.place(position, stored_at) is Place.INSIDE


def _before(bound: Bound, position: int, stored_at: float) -> bool:
    if isinstance(bound, AtPosition):
        return position < bound.position
    return stored_at < bound.epoch


def parse_bound(text: str, *, now: float) -> Bound:
    """``text`` as a bound: a position (an integer, 0 or more), a time before ``now``
    (``-30s``, ``-10m``, ``-2h``, ``-1d``, decimals allowed), or an ISO-8601 time (a time
    without a zone is UTC). Raises ``BadWindowError`` saying what is accepted."""
    spelled = text.strip()
    if spelled.isascii() and spelled.isdigit():
        return AtPosition(int(spelled))
    relative = _RELATIVE.fullmatch(spelled)
    if relative is not None:
        amount, unit = relative.groups()
        return AtTime(now - float(amount) * _UNIT_SECONDS[unit])
    try:
        moment = datetime.fromisoformat(spelled)
    except ValueError:
        raise BadWindowError(
            f"{text!r} is not a position (an integer), a time before now (-30s, -10m, -2h, "
            "-1d) or an ISO-8601 time (2026-01-31T12:00:00Z)"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return AtTime(moment.timestamp())


def window_of(start: str, end: str | None, *, now: float) -> Window:
    """The window ``--from start [--to end]`` names. Raises ``BadWindowError`` for a bound
    that cannot be read or an end before the start (both of one kind; an end equal to the
    start is an empty window)."""
    first = parse_bound(start, now=now)
    last = None if end is None else parse_bound(end, now=now)
    if last is not None and type(first) is type(last) and _key(last) < _key(first):
        raise BadWindowError(f"--to {end} is before --from {start}")
    return Window(first, last)


def _key(bound: Bound) -> float:
    return bound.position if isinstance(bound, AtPosition) else bound.epoch
