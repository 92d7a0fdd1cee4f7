"""What a ``CoordinationStore`` (``core.ports``) holds and tells: keys, revisions, listings
and the changes a watch yields.

A key is one or more segments joined by ``/``; a segment is made of ``A-Z a-z 0-9 _ = -``
(the characters every store takes: NATS KV turns the ``/`` into its ``.``, and ids are
escaped into this alphabet by their callers). A prefix is empty (every key) or segments
each followed by ``/``, so a prefix always ends at a segment boundary (NATS subjects only
match whole tokens).

A revision is the store's counter of writes: every write gets one higher than any before
it (etcd's revision, a NATS stream sequence, a Redis counter), so revisions order the
writes of one store. Several deletions made at once (a lease's keys) may share one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = [
    "KeyChange",
    "KeyValue",
    "Listing",
    "Resync",
    "check_key",
    "check_prefix",
    "decode_segment",
    "encode_segment",
]

_KEY = re.compile(r"[A-Za-z0-9_=-]+(?:/[A-Za-z0-9_=-]+)*")
_PREFIX = re.compile(r"(?:[A-Za-z0-9_=-]+/)*")
_SAFE = re.compile(r"[A-Za-z0-9_-]")
_ESCAPED = re.compile(r"(?:=[0-9A-F]{2})+")


def encode_segment(raw: str) -> str:
    """A free string (a member or project id) as one key segment, reversibly: every
    character outside ``A-Za-z0-9_-`` becomes ``=HH`` per UTF-8 byte; the empty string is
    ``=`` (which escaping never produces)."""
    if not raw:
        return "="
    return "".join(
        c if _SAFE.fullmatch(c) else "".join(f"={b:02X}" for b in c.encode()) for c in raw
    )


def decode_segment(segment: str) -> str:
    """The string ``encode_segment`` made ``segment`` from."""
    if segment == "=":
        return ""
    return _ESCAPED.sub(lambda m: bytes.fromhex(m.group().replace("=", "")).decode(), segment)


def check_key(key: str) -> str:
    """``key`` when it is a valid key (module doc); ``ValueError`` otherwise."""
    if not _KEY.fullmatch(key):
        raise ValueError(f"not a store key (segments of A-Za-z0-9_=- joined by '/'): {key!r}")
    return key


def check_prefix(prefix: str) -> str:
    """``prefix`` when it is a valid prefix (module doc); ``ValueError`` otherwise."""
    if not _PREFIX.fullmatch(prefix):
        raise ValueError(f"not a store prefix (empty, or segments each ending in '/'): {prefix!r}")
    return prefix


@dataclass(frozen=True, slots=True)
class KeyValue:
    """A key as stored: its value and the revision of its last write."""

    key: str
    value: bytes
    revision: int


@dataclass(frozen=True, slots=True)
class Listing:
    """Every key under a prefix, sorted by key, as the store held them at ``revision``:
    a watch from ``revision`` on continues it without a gap or a repeat."""

    entries: tuple[KeyValue, ...]
    revision: int

    def get(self, key: str) -> KeyValue | None:
        return next((entry for entry in self.entries if entry.key == key), None)


@dataclass(frozen=True, slots=True)
class KeyChange:
    """One write seen by a watch: ``value`` None for a deletion (by a delete, or with its
    lease)."""

    key: str
    value: bytes | None
    revision: int


@dataclass(frozen=True, slots=True)
class Resync:
    """The watch could not give every change since the last one it yielded (the store
    compacted or lost its history, or restarted without it): ``listing`` is the prefix now,
    and the watch goes on after it. The watcher replaces its whole view with it."""

    listing: Listing
