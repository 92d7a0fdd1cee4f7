"""Values as stored in etcd: the shared JSON shapes (``adapters._json``) as bytes. A hold's
version is its key's mod revision, not part of the value."""

from __future__ import annotations

from adapters._json import (
    StoredAssignment,
    StoredHold,
    decode_assignment,
    decode_hold,
    dumps,
    loads_object,
    stats_from_json,
    stats_to_json,
)
from adapters._json import encode_assignment as _encode_assignment
from adapters._json import encode_hold as _encode_hold
from core.model import Assignment, MemberId, MemberStats

__all__ = [
    "StoredAssignment",
    "StoredHold",
    "decode_assignment",
    "decode_hold",
    "decode_stats",
    "encode_assignment",
    "encode_hold",
    "encode_stats",
]


def encode_stats(stats: MemberStats) -> bytes:
    return dumps(stats_to_json(stats)).encode()


def decode_stats(raw: bytes) -> MemberStats:
    return stats_from_json(loads_object(raw, "member stats"))


def encode_assignment(assignment: Assignment, term: int) -> bytes:
    return _encode_assignment(assignment, term).encode()


def encode_hold(member_id: MemberId, generation: int) -> bytes:
    return _encode_hold(member_id, generation).encode()
