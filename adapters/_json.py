"""The JSON shapes every coordination backend stores, as pydantic models: member stats,
assignments (with the term that published them) and holds.

Compact, key-sorted JSON; decoding is strict (``ValueError`` naming what was wrong:
pydantic's ``ValidationError`` is one), except that stats ignore unknown keys and default
missing ones, so members of two versions can share a store during a rolling upgrade.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, StrictInt, ValidationError

from core.model import Assignment, MemberId, MemberStats

__all__ = [
    "StatsJson",
    "StoredAssignment",
    "StoredHold",
    "assignment_from_json",
    "assignment_to_json",
    "decode_assignment",
    "decode_hold",
    "decode_json",
    "dumps",
    "encode_assignment",
    "encode_hold",
    "loads_object",
    "stats_from_json",
    "stats_to_json",
]


def dumps(value: object) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def loads_object(raw: bytes | str, what: str) -> dict[str, Any]:
    try:
        value = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{what}: not JSON: {raw[:80]!r}") from exc
    if not isinstance(value, dict):
        raise ValueError(f"{what}: expected a JSON object, got {raw[:80]!r}")
    return value


class StatsJson(BaseModel):
    """Member stats on the wire: unknown keys ignored, missing ones defaulted."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    cpu: float = 0.0
    project_count: int = 0
    last_message_id: str = ""
    rate: float = 0.0
    top_projects: tuple[tuple[str, int], ...] = ()

    def to_stats(self) -> MemberStats:
        return MemberStats(
            self.cpu, self.project_count, self.last_message_id, self.rate, self.top_projects
        )


class _Assignment(BaseModel):
    generation: StrictInt
    owners: list[list[str]]
    term: StrictInt | None = None


class _Hold(BaseModel):
    member: str
    generation: StrictInt
    version: StrictInt | None = None


def _invalid(what: str, exc: ValidationError, raw: object) -> ValueError:
    problems = "; ".join(
        f"{'.'.join(str(p) for p in e['loc']) or 'value'}: {e['msg']}" for e in exc.errors()
    )
    return ValueError(f"{what}: {problems}: {str(raw)[:80]}")


Model = TypeVar("Model", bound=BaseModel)


def decode_json(model: type[Model], raw: bytes | str, what: str) -> Model:
    """``raw`` as ``model``; ``ValueError`` naming ``what`` and every problem."""
    try:
        return model.model_validate_json(raw)
    except ValidationError as exc:
        raise _invalid(what, exc, raw) from None


def stats_to_json(stats: MemberStats) -> dict[str, Any]:
    return asdict(stats)


def stats_from_json(value: object) -> MemberStats:
    try:
        return StatsJson.model_validate(value).to_stats()
    except ValidationError as exc:
        raise _invalid("member stats", exc, value) from None


def assignment_to_json(assignment: Assignment) -> dict[str, Any]:
    return {
        "generation": assignment.generation,
        "owners": [list(owners) for owners in assignment.owners],
    }


def assignment_from_json(value: object) -> Assignment:
    try:
        wire = _Assignment.model_validate(value)
    except ValidationError as exc:
        raise _invalid("assignment", exc, value) from None
    return Assignment(wire.generation, tuple(tuple(owners) for owners in wire.owners))


@dataclass(frozen=True, slots=True)
class StoredAssignment:
    """An assignment as a key-value store keeps it: with the term that published it."""

    assignment: Assignment
    term: int


def encode_assignment(assignment: Assignment, term: int) -> str:
    return dumps({**assignment_to_json(assignment), "term": term})


def decode_assignment(raw: bytes | str) -> StoredAssignment:
    wire = decode_json(_Assignment, raw, "assignment")
    if wire.term is None:
        raise ValueError(f"assignment: term is missing: {str(raw)[:80]}")
    return StoredAssignment(
        Assignment(wire.generation, tuple(tuple(owners) for owners in wire.owners)), wire.term
    )


@dataclass(frozen=True, slots=True)
class StoredHold:
    """A hold as stored; ``version`` only where the store keeps it in the value (Redis)."""

    member_id: MemberId
    generation: int
    version: int | None


def encode_hold(member_id: MemberId, generation: int, version: int | None = None) -> str:
    value: dict[str, object] = {"generation": generation, "member": member_id}
    if version is not None:
        value["version"] = version
    return dumps(value)


def decode_hold(raw: bytes | str) -> StoredHold:
    wire = decode_json(_Hold, raw, "hold")
    return StoredHold(wire.member, wire.generation, wire.version)
