"""Values as stored in etcd: compact, sorted JSON. Decoding is strict (``ValueError``)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

from core.model import Assignment, MemberId, MemberStats


def _dumps(value: object) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def _loads_object(raw: bytes, what: str) -> dict[str, Any]:
    try:
        value = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{what}: not JSON: {raw[:80]!r}") from exc
    if not isinstance(value, dict):
        raise ValueError(f"{what}: expected a JSON object, got {raw[:80]!r}")
    return value


def encode_stats(stats: MemberStats) -> bytes:
    return _dumps(asdict(stats))


def decode_stats(raw: bytes) -> MemberStats:
    """Unknown keys are ignored and missing ones take their defaults (rolling upgrades)."""
    value = _loads_object(raw, "member stats")
    defaults = MemberStats()
    try:
        return MemberStats(
            cpu=float(value.get("cpu", defaults.cpu)),
            project_count=int(value.get("project_count", defaults.project_count)),
            last_message_id=str(value.get("last_message_id", defaults.last_message_id)),
            rate=float(value.get("rate", defaults.rate)),
        )
    except (TypeError, ValueError) as exc:
        raise ValueError(f"member stats: {exc}: {raw[:80]!r}") from exc


@dataclass(frozen=True, slots=True)
class StoredAssignment:
    assignment: Assignment
    term: int


def encode_assignment(assignment: Assignment, term: int) -> bytes:
    return _dumps(
        {
            "generation": assignment.generation,
            "owners": [list(owners) for owners in assignment.owners],
            "term": term,
        }
    )


def decode_assignment(raw: bytes) -> StoredAssignment:
    value = _loads_object(raw, "assignment")
    try:
        generation = value["generation"]
        owners = value["owners"]
        term = value["term"]
        if not isinstance(generation, int) or not isinstance(term, int):
            raise TypeError("generation and term must be integers")
        parsed = tuple(tuple(str(m) for m in o) for o in owners)
    except (KeyError, TypeError) as exc:
        raise ValueError(f"assignment: {exc}: {raw[:80]!r}") from exc
    return StoredAssignment(Assignment(generation=generation, owners=parsed), term)


@dataclass(frozen=True, slots=True)
class StoredHold:
    member_id: MemberId
    generation: int


def encode_hold(member_id: MemberId, generation: int) -> bytes:
    return _dumps({"generation": generation, "member": member_id})


def decode_hold(raw: bytes) -> StoredHold:
    value = _loads_object(raw, "hold")
    member, generation = value.get("member"), value.get("generation")
    if not isinstance(member, str) or not isinstance(generation, int):
        raise ValueError(f"hold: expected member and generation: {raw[:80]!r}")
    return StoredHold(member, generation)
