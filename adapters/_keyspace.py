"""``KeySpace``: a ``CoordinationStore``'s state and its rules, applied in one place,
without I/O and without a clock of its own.

A dialect that has no server-side compare-and-set or leases keeps one and feeds it every
write in the order its store decided (the in-memory store: call order; a log-backed store:
log order, so every replica decides alike). Each write states its revision (higher than
any before) and each lease operation the time it happens at; ``expire`` ends the leases
whose deadline that time has passed, deleting their keys. Watchers read ``changes_after``:
a bounded history of changes, ``None`` once what they missed has fallen out of it.
"""

from __future__ import annotations

import base64
import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from core.errors import LeaseLostError, RevisionConflictError
from core.keyspace import KeyChange, KeyValue, Listing

__all__ = ["KeySpace"]


@dataclass(slots=True)
class _Lease:
    ttl: float
    deadline: float
    keys: set[str] = field(default_factory=set)


@dataclass(frozen=True, slots=True)
class _Stored:
    entry: KeyValue
    lease: int | None


class KeySpace:
    """Keys, leases and the recent changes; ``history`` changes are kept for watchers."""

    def __init__(self, *, history: int = 1024) -> None:
        self.revision = 0  # of the last change
        self._stored: dict[str, _Stored] = {}
        self._leases: dict[int, _Lease] = {}
        self._history: deque[KeyChange] = deque(maxlen=history)
        self._forgotten = 0  # the revision of the newest change dropped from the history

    # --- reads -----------------------------------------------------------------------------

    def get(self, key: str) -> KeyValue | None:
        stored = self._stored.get(key)
        return None if stored is None else stored.entry

    def listing(self, prefix: str) -> Listing:
        entries = sorted(
            (stored.entry for key, stored in self._stored.items() if key.startswith(prefix)),
            key=lambda entry: entry.key,
        )
        return Listing(tuple(entries), self.revision)

    def changes_after(self, after: int) -> list[KeyChange] | None:
        """The changes after revision ``after`` in order, or None when some of them are no
        longer kept (the watcher needs a fresh listing)."""
        if self._forgotten > after:
            return None
        return [change for change in self._history if change.revision > after]

    def next_deadline(self) -> float:
        return min((held.deadline for held in self._leases.values()), default=math.inf)

    def image(self) -> dict[str, Any]:
        """The keys and leases as JSON-ready data (``restored`` reads it back)."""
        return {
            "revision": self.revision,
            "keys": [
                [k, base64.b64encode(s.entry.value).decode(), s.entry.revision, s.lease]
                for k, s in sorted(self._stored.items())
            ],
            "leases": [[lease, held.ttl, held.deadline] for lease, held in self._leases.items()],
        }

    @staticmethod
    def restored(image: dict[str, Any], *, history: int = 1024) -> KeySpace:
        """The space ``image`` describes; its watchers start with a listing (no history).
        ``ValueError`` (or ``KeyError``/``TypeError``) when ``image`` is malformed."""
        space = KeySpace(history=history)
        space.revision = space._forgotten = int(image["revision"])
        for lease, ttl, deadline in image["leases"]:
            space._leases[int(lease)] = _Lease(float(ttl), float(deadline))
        for key, value, revision, lease in image["keys"]:
            entry = KeyValue(str(key), base64.b64decode(value), int(revision))
            space._stored[entry.key] = _Stored(entry, None if lease is None else int(lease))
            if lease is not None:
                space._leases[int(lease)].keys.add(entry.key)
        return space

    # --- writes ----------------------------------------------------------------------------

    def create(self, key: str, value: bytes, lease: int | None, *, revision: int) -> int:
        if key in self._stored:
            raise RevisionConflictError(f"{key}: exists")
        return self._put(key, value, lease, revision)

    def update(
        self, key: str, value: bytes, lease: int | None, *, expected: int, revision: int
    ) -> int:
        self._compare(key, expected)
        return self._put(key, value, lease, revision)

    def delete(self, key: str, *, expected: int, revision: int) -> int:
        self._compare(key, expected)
        return self._remove(key, revision)

    # --- leases ----------------------------------------------------------------------------

    def grant(self, lease: int, ttl: float, *, now: float) -> None:
        self._leases[lease] = _Lease(ttl, now + ttl)

    def keep_alive(self, lease: int, *, now: float) -> None:
        held = self._live(lease)
        held.deadline = now + held.ttl

    def revoke(self, lease: int, *, revision: int) -> None:
        """End ``lease`` (gone already: nothing); its keys' deletions share ``revision``."""
        held = self._leases.pop(lease, None)
        for key in sorted(held.keys if held is not None else ()):
            self._remove(key, revision)

    def expire(self, *, now: float, revision: int) -> bool:
        """End every lease whose deadline ``now`` has reached; True if any ended."""
        ended = [lease for lease, held in self._leases.items() if held.deadline <= now]
        for lease in ended:
            self.revoke(lease, revision=revision)
        return bool(ended)

    # --- the rules -------------------------------------------------------------------------

    def _compare(self, key: str, expected: int) -> None:
        stored = self._stored.get(key)
        if stored is None or stored.entry.revision != expected:
            raise RevisionConflictError(f"{key}: not at revision {expected}")

    def _live(self, lease: int) -> _Lease:
        held = self._leases.get(lease)
        if held is None:
            raise LeaseLostError(f"lease {lease} expired or was revoked")
        return held

    def _put(self, key: str, value: bytes, lease: int | None, revision: int) -> int:
        holder = None if lease is None else self._live(lease)
        self._unbind(key)
        if holder is not None:
            holder.keys.add(key)
        self._stored[key] = _Stored(KeyValue(key, value, revision), lease)
        return self._record(KeyChange(key, value, revision))

    def _remove(self, key: str, revision: int) -> int:
        self._unbind(key)
        del self._stored[key]
        return self._record(KeyChange(key, None, revision))

    def _unbind(self, key: str) -> None:
        stored = self._stored.get(key)
        if stored is not None and stored.lease in self._leases:
            self._leases[stored.lease].keys.discard(key)

    def _record(self, change: KeyChange) -> int:
        self.revision = change.revision
        if len(self._history) == self._history.maxlen:
            self._forgotten = self._history[0].revision
        self._history.append(change)
        return change.revision
