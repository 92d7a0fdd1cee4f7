"""The message envelope that travels from gateway to sink, and its validation rules."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from enum import StrEnum

__all__ = [
    "PROJECT_ID_PATTERN",
    "Envelope",
    "LandedRow",
    "LedgerEntry",
    "MessageKind",
    "Outcome",
    "is_valid_project_id",
]

PROJECT_ID_PATTERN = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


@functools.lru_cache(maxsize=65_536)  # asked for every delivered message of a project
def is_valid_project_id(project_id: str) -> bool:
    """True when ``project_id`` is one safe subject token (the gateway rejects anything else)."""
    return PROJECT_ID_PATTERN.fullmatch(project_id) is not None


class MessageKind(StrEnum):
    """An announcement opens a project on its partition (the reference handshake); data is data."""

    ANNOUNCE = "announce"
    DATA = "data"


@dataclass(frozen=True, slots=True)
class Envelope:
    """What the gateway stamps on every accepted message.

    ``message_id`` is unique per accepted message and is the broker's de-duplication id,
    so a retried publish is a no-op. ``sequence`` counts per (gateway_id, project_id)
    from 1 without gaps: the audit finds losses as gaps in it.
    ``received_at`` is the gateway's wall clock in seconds since the epoch.
    """

    message_id: str
    project_id: str
    partition: int
    gateway_id: str
    sequence: int
    received_at: float
    payload: bytes
    kind: MessageKind = MessageKind.DATA


@dataclass(frozen=True, slots=True)
class LandedRow:
    """One message as the sink lands it: the envelope plus who handled it, when, and under
    which generation (so an audit can prove a deposed owner wrote nothing), and where the
    broker delivered it from."""

    envelope: Envelope
    generation: int
    handler_id: str
    handled_at: float
    log_id: str = ""  # the broker log it was delivered from (``Subscription.log_id``)...
    position: int = 0  # ...and its place there: the landed table settles positions by it


class Outcome(StrEnum):
    ACCEPTED = "accepted"  # answered 202: the broker stored every message
    REFUSED = "refused"  # answered 503: the sequences were reserved but never accepted


@dataclass(frozen=True, slots=True)
class LedgerEntry:
    """What the gateway answered for one request's sequence range: the audit's record of
    what was accepted (so a missing tail is lost, not in flight, and a refused range is
    not counted as lost)."""

    gateway_id: str
    project_id: str
    first_sequence: int
    last_sequence: int
    outcome: Outcome
    received_at: float
    decided_at: float
