"""Values as stored in Redis. Decoding is strict (``ValueError``).

- member ``consumers:{id}``: ``{token}:{stats JSON}``; the token (random hex, no colon)
  is the lease's owner check, done by prefix comparison in Lua.
- ``leader``: ``{token}:{term}:{leader id}`` (written by the campaign script).
- ``assignment``: compact, sorted JSON ``{generation, owners, term}`` (as on etcd).
- hold (field of ``holds``): compact, sorted JSON ``{generation, member, version}``.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import asdict, dataclass
from typing import Any

from core.model import Assignment, MemberId, MemberStats, Partition
from core.ports import Hold, LeaderInfo


def new_token() -> str:
    """A lease owner token: 32 hex digits."""
    return secrets.token_hex(16)


def new_version() -> int:
    """A hold version: random, so that a version seen before a Redis restart without
    persistence (which would reset a counter) cannot match a later hold. 52 bits: exact
    as a double, in Lua and in JSON readers."""
    return secrets.randbits(52) + 1


def _dumps(value: object) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _loads_object(raw: bytes | str, what: str) -> dict[str, Any]:
    try:
        value = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{what}: not JSON: {raw[:80]!r}") from exc
    if not isinstance(value, dict):
        raise ValueError(f"{what}: expected a JSON object, got {raw[:80]!r}")
    return value


def _text(raw: bytes, what: str) -> str:
    try:
        return raw.decode()
    except UnicodeDecodeError as exc:
        raise ValueError(f"{what}: not UTF-8: {raw[:80]!r}") from exc


# --- members ---------------------------------------------------------------------------


def encode_member(token: str, stats: MemberStats) -> str:
    return f"{token}:{_dumps(asdict(stats))}"


def decode_member(raw: bytes) -> MemberStats:
    """The stats of a member value; unknown keys are ignored, missing ones default."""
    token, sep, stats = _text(raw, "member").partition(":")
    if not sep or not token:
        raise ValueError(f"member: expected token:stats, got {raw[:80]!r}")
    value = _loads_object(stats, "member stats")
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


# --- leader ----------------------------------------------------------------------------


def decode_leader(raw: bytes) -> LeaderInfo:
    parts = _text(raw, "leader").split(":", 2)
    if len(parts) != 3 or not parts[1].isdigit():
        raise ValueError(f"leader: expected token:term:id, got {raw[:80]!r}")
    return LeaderInfo(leader_id=parts[2], term=int(parts[1]))


# --- assignment ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StoredAssignment:
    assignment: Assignment
    term: int


def encode_assignment(assignment: Assignment, term: int) -> str:
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


# --- holds -----------------------------------------------------------------------------


def encode_hold(member_id: MemberId, generation: int, version: int) -> str:
    return _dumps({"generation": generation, "member": member_id, "version": version})


def decode_hold(partition: Partition, raw: bytes) -> Hold:
    value = _loads_object(raw, "hold")
    member, generation = value.get("member"), value.get("generation")
    version = value.get("version")
    if (
        not isinstance(member, str)
        or not isinstance(generation, int)
        or not isinstance(version, int)
    ):
        raise ValueError(f"hold: expected member, generation and version: {raw[:80]!r}")
    return Hold(partition, member, generation, version)
