"""The key layout in the bucket (see docs/architecture.md) and the escaping of ids.

KV keys allow ``[-/_=.A-Za-z0-9]`` with dots separating tokens; member and project ids
are free strings, so every other character (and the dot) is escaped as ``=HH`` per UTF-8
byte, reversibly.
"""

from __future__ import annotations

import re

from core.model import MemberId, Partition

__all__ = [
    "ASSIGNMENT",
    "ASSIGNMENT_FENCE",
    "HOLDS",
    "LEADER",
    "MEMBERS",
    "REPORTS",
    "decode_id",
    "encode_id",
    "hold",
    "member",
    "project",
    "projects",
    "report",
]

MEMBERS = "members."
REPORTS = "reports."
LEADER = "leader"
ASSIGNMENT = "assignment"
# The leadership that wrote the assignment last: the fenced write's first message (its
# comparison with the leader key's revision needs a write to ride on).
ASSIGNMENT_FENCE = "assignment-fence"
HOLDS = "holds."
_PROJECTS = "projects."
_SAFE = re.compile(r"[A-Za-z0-9_-]")
_ESCAPED = re.compile(r"(?:=[0-9A-F]{2})+")


def encode_id(raw: str) -> str:
    if not raw:
        return "="  # an empty id: a token of its own (never produced by escaping)
    return "".join(
        c if _SAFE.fullmatch(c) else "".join(f"={b:02X}" for b in c.encode()) for c in raw
    )


def decode_id(token: str) -> str:
    if token == "=":
        return ""
    return _ESCAPED.sub(lambda m: bytes.fromhex(m.group().replace("=", "")).decode(), token)


def member(member_id: MemberId) -> str:
    return MEMBERS + encode_id(member_id)


def report(member_id: MemberId) -> str:
    return REPORTS + encode_id(member_id)


def hold(partition: Partition) -> str:
    return f"{HOLDS}{partition}"


def projects(partition: Partition) -> str:
    return f"{_PROJECTS}{partition}."


def project(partition: Partition, project_id: str) -> str:
    return projects(partition) + encode_id(project_id)
