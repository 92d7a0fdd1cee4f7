"""Values as stored in Redis. Decoding is strict (``ValueError``).

- member ``consumers:{id}``: ``{token}:{stats JSON}``; the token (random hex, no colon)
  is the lease's owner check, done by prefix comparison in Lua.
- ``leader``: ``{token}:{term}:{leader id}`` (written by the campaign script).
- ``assignment``: compact, sorted JSON ``{generation, owners, term}`` (as on etcd).
- hold (field of ``holds``): compact, sorted JSON ``{generation, member, version}``.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from adapters._json import (
    assignment_from_json,
    assignment_to_json,
    dumps,
    loads_object,
    stats_from_json,
    stats_to_json,
)
from core.coordination import Hold
from core.model import Assignment, MemberId, MemberStats, Partition
from core.ports import LeaderInfo


def new_token() -> str:
    """A lease owner token: 32 hex digits."""
    return secrets.token_hex(16)


def new_version() -> int:
    """A hold version: random, so that a version seen before a Redis restart without
    persistence (which would reset a counter) cannot match a later hold. 52 bits: exact
    as a double, in Lua and in JSON readers."""
    return secrets.randbits(52) + 1


def _text(raw: bytes, what: str) -> str:
    try:
        return raw.decode()
    except UnicodeDecodeError as exc:
        raise ValueError(f"{what}: not UTF-8: {raw[:80]!r}") from exc


# --- members ---------------------------------------------------------------------------


def encode_member(token: str, stats: MemberStats) -> str:
    return f"{token}:{dumps(stats_to_json(stats))}"


def decode_member(raw: bytes) -> MemberStats:
    """The stats of a member value; unknown keys are ignored, missing ones default."""
    token, sep, stats = _text(raw, "member").partition(":")
    if not sep or not token:
        raise ValueError(f"member: expected token:stats, got {raw[:80]!r}")
    return stats_from_json(loads_object(stats, "member stats"))


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
    return dumps({**assignment_to_json(assignment), "term": term})


def decode_assignment(raw: bytes) -> StoredAssignment:
    value = loads_object(raw, "assignment")
    term = value.get("term")
    if not isinstance(term, int) or isinstance(term, bool):
        raise ValueError(f"assignment: term must be an integer: {raw[:80]!r}")
    return StoredAssignment(assignment_from_json(value), term)


# --- holds -----------------------------------------------------------------------------


def encode_hold(member_id: MemberId, generation: int, version: int) -> str:
    return dumps({"generation": generation, "member": member_id, "version": version})


def decode_hold(partition: Partition, raw: bytes) -> Hold:
    value = loads_object(raw, "hold")
    member, generation = value.get("member"), value.get("generation")
    version = value.get("version")
    if (
        not isinstance(member, str)
        or not isinstance(generation, int)
        or not isinstance(version, int)
    ):
        raise ValueError(f"hold: expected member, generation and version: {raw[:80]!r}")
    return Hold(partition, member, generation, version)
