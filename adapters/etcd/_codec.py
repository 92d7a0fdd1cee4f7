"""Values as stored in etcd: compact, sorted JSON. Decoding is strict (``ValueError``)."""

from __future__ import annotations

from dataclasses import dataclass

from adapters._json import (
    assignment_from_json,
    assignment_to_json,
    dumps,
    loads_object,
    stats_from_json,
    stats_to_json,
)
from core.model import Assignment, MemberId, MemberStats


def _dumps(value: object) -> bytes:
    return dumps(value).encode()


def encode_stats(stats: MemberStats) -> bytes:
    return _dumps(stats_to_json(stats))


def decode_stats(raw: bytes) -> MemberStats:
    return stats_from_json(loads_object(raw, "member stats"))


@dataclass(frozen=True, slots=True)
class StoredAssignment:
    assignment: Assignment
    term: int


def encode_assignment(assignment: Assignment, term: int) -> bytes:
    return _dumps({**assignment_to_json(assignment), "term": term})


def decode_assignment(raw: bytes) -> StoredAssignment:
    value = loads_object(raw, "assignment")
    term = value.get("term")
    if not isinstance(term, int) or isinstance(term, bool):
        raise ValueError(f"assignment: term must be an integer: {raw[:80]!r}")
    return StoredAssignment(assignment_from_json(value), term)


@dataclass(frozen=True, slots=True)
class StoredHold:
    member_id: MemberId
    generation: int


def encode_hold(member_id: MemberId, generation: int) -> bytes:
    return _dumps({"generation": generation, "member": member_id})


def decode_hold(raw: bytes) -> StoredHold:
    value = loads_object(raw, "hold")
    member, generation = value.get("member"), value.get("generation")
    if not isinstance(member, str) or not isinstance(generation, int):
        raise ValueError(f"hold: expected member and generation: {raw[:80]!r}")
    return StoredHold(member, generation)
