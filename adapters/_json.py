"""The JSON shapes every coordination backend stores: member stats and assignments.

Compact, key-sorted JSON; decoding is strict (``ValueError`` naming what was wrong), except
that stats ignore unknown keys and default missing ones, so members of two versions can
share a store during a rolling upgrade.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

from core.model import Assignment, MemberStats

__all__ = [
    "assignment_from_json",
    "assignment_to_json",
    "dumps",
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


def stats_to_json(stats: MemberStats) -> dict[str, Any]:
    return asdict(stats)


def stats_from_json(value: object) -> MemberStats:
    if not isinstance(value, dict):
        raise ValueError(f"member stats: expected an object, got {value!r}")
    defaults = MemberStats()
    try:
        return MemberStats(
            cpu=float(value.get("cpu", defaults.cpu)),
            project_count=int(value.get("project_count", defaults.project_count)),
            last_message_id=str(value.get("last_message_id", defaults.last_message_id)),
            rate=float(value.get("rate", defaults.rate)),
        )
    except (TypeError, ValueError) as exc:
        raise ValueError(f"member stats: {exc}: {value!r}") from exc


def assignment_to_json(assignment: Assignment) -> dict[str, Any]:
    return {
        "generation": assignment.generation,
        "owners": [list(owners) for owners in assignment.owners],
    }


def assignment_from_json(value: object) -> Assignment:
    if not isinstance(value, dict):
        raise ValueError(f"assignment: expected an object, got {value!r}")
    generation = value.get("generation")
    owners = value.get("owners")
    if not isinstance(generation, int) or isinstance(generation, bool):
        raise ValueError(f"assignment: generation must be an integer, got {generation!r}")
    if not isinstance(owners, list) or not all(isinstance(o, list) for o in owners):
        raise ValueError(f"assignment: owners must be a list of lists, got {owners!r}"[:200])
    return Assignment(generation, tuple(tuple(str(m) for m in o) for o in owners))
