"""Values as stored in Redis. Decoding is strict (``ValueError``).

- member ``consumers:{id}``: ``{token}:``; the token (random hex, no colon) is the
  lease's owner check, done by prefix comparison in Lua.
- report (field ``{id}`` of ``reports``): ``{token}:{stats JSON}``, the member's token.
- ``leader``: ``{token}:{term}:{leader id}`` (written by the campaign script).
- ``assignment``: compact, sorted JSON ``{generation, owners, term}`` (as on etcd).
- hold (field of ``holds``): compact, sorted JSON ``{generation, member, version}``.
"""

from __future__ import annotations

import secrets

from adapters._json import (
    StoredAssignment,
    decode_assignment,
    dumps,
    encode_assignment,
    encode_hold,
    loads_object,
    stats_from_json,
    stats_to_json,
)
from adapters._json import decode_hold as decode_stored_hold
from core.coordination import Hold
from core.model import MemberStats, Partition
from core.ports import LeaderInfo

__all__ = [
    "StoredAssignment",
    "decode_assignment",
    "decode_hold",
    "decode_leader",
    "decode_report",
    "encode_assignment",
    "encode_hold",
    "encode_member",
    "encode_report",
    "new_token",
    "new_version",
]


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


def encode_member(token: str) -> str:
    return f"{token}:"


def encode_report(token: str, stats: MemberStats) -> str:
    return f"{token}:{dumps(stats_to_json(stats))}"


def decode_report(raw: bytes) -> MemberStats:
    """The stats of a report; unknown keys are ignored, missing ones default."""
    token, sep, stats = _text(raw, "report").partition(":")
    if not sep or not token:
        raise ValueError(f"report: expected token:stats, got {raw[:80]!r}")
    return stats_from_json(loads_object(stats, "member stats"))


# --- leader ----------------------------------------------------------------------------


def decode_leader(raw: bytes) -> LeaderInfo:
    parts = _text(raw, "leader").split(":", 2)
    if len(parts) != 3 or not parts[1].isdigit():
        raise ValueError(f"leader: expected token:term:id, got {raw[:80]!r}")
    return LeaderInfo(leader_id=parts[2], term=int(parts[1]))


# --- holds -----------------------------------------------------------------------------


def decode_hold(partition: Partition, raw: bytes) -> Hold:
    stored = decode_stored_hold(raw)
    if stored.version is None:
        raise ValueError(f"hold: version is missing: {raw[:80]!r}")
    return Hold(partition, stored.member_id, stored.generation, stored.version)
