"""The assignment, the holds and the project registrations over a ``CoordinationStore``:
each write reads what it decides on, lets ``CoordinationState`` decide, and writes only if
the revisions it read did not move (else it reads and decides again).

- ``assignment/record``: ``{"assignment", "term", "stamp"}``: the assignment with the
  term that published it, and the latest term that took office (``StoreElection``'s
  stamp). ``publish`` is decided with the leader key read beside it (a leader whose term
  is not the stamp has not taken office) and written only over the record it read.
- ``holds/{p}``: ``{"member", "generation"}``; the key's revision is the hold's version,
  so claiming over an observed hold is an update at that revision.
- ``projects/{p}/{project}``: the registration's expiry (the registrant's clock, ASCII).
  A registration lists the partition, lets the model admit (cap, refresh, expired ones
  dropped) and writes the difference, each key at the revision listed.
"""

from __future__ import annotations

import logging
import math
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from adapters._json import (
    assignment_from_json,
    assignment_to_json,
    decode_hold,
    dumps,
    encode_hold,
    loads_object,
)
from adapters.coordination._base import (
    ASSIGNMENT,
    HOLDS,
    LEADER,
    StoreAdapter,
    hold_key,
    parent,
    projects_prefix,
    put,
    snapshots,
)
from core.coordination import (
    CoordinationState,
    Hold,
    Leader,
    Registration,
    registration,
    registration_ids,
    replaced_version,
    supersedes,
)
from core.errors import FencedError, RevisionConflictError
from core.keyspace import KeyValue, decode_segment, encode_segment
from core.model import Assignment, MemberId, Partition
from core.ports import CoordinationStore

__all__ = [
    "AssignmentRecord",
    "StoreAssignmentStore",
    "StoreHoldStore",
    "StoreProjectRegistry",
    "office_holder",
    "office_value",
    "read_record",
]

_log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class AssignmentRecord:
    assignment: Assignment | None = None
    term: int = 0  # the term that published ``assignment``
    stamp: int = 0  # the latest term that took office

    def state(self, leader: Leader | None) -> CoordinationState:
        return CoordinationState(
            leader=leader,
            max_term=self.stamp,
            assignment=self.assignment,
            assignment_term=self.term,
        )

    def encode(self) -> bytes:
        value: dict[str, Any] = {"term": self.term, "stamp": self.stamp}
        if self.assignment is not None:
            value["assignment"] = assignment_to_json(self.assignment)
        return dumps(value).encode()

    @classmethod
    def decode(cls, raw: bytes) -> AssignmentRecord:
        value = loads_object(raw, "assignment record")
        assignment = value.get("assignment")
        term, stamp = value.get("term"), value.get("stamp")
        if not isinstance(term, int) or not isinstance(stamp, int):
            raise ValueError(f"assignment record: term and stamp must be integers: {raw[:80]!r}")
        return cls(None if assignment is None else assignment_from_json(assignment), term, stamp)


def office_value(leader_id: MemberId, incarnation: str) -> bytes:
    return dumps({"id": leader_id, "incarnation": incarnation}).encode()


def office_holder(office: KeyValue) -> Leader:
    """The leadership ``leader/office`` holds: its term is the revision of its create
    (the key is never updated)."""
    value = loads_object(office.value, "leader")
    leader_id, incarnation = value.get("id"), value.get("incarnation")
    if not isinstance(leader_id, str) or not isinstance(incarnation, str):
        raise ValueError(f"leader: id and incarnation must be strings: {office.value[:80]!r}")
    return Leader(leader_id, office.revision, incarnation)


async def read_record(store: CoordinationStore) -> tuple[AssignmentRecord, KeyValue | None]:
    current = await store.get(ASSIGNMENT)
    return (
        AssignmentRecord() if current is None else AssignmentRecord.decode(current.value)
    ), current


class StoreAssignmentStore(StoreAdapter):
    """The ``AssignmentStore`` port over a ``CoordinationStore``."""

    async def publish(self, assignment: Assignment, fence: Leader) -> None:
        while True:
            record, current = await read_record(self.store)
            office = await self.store.get(LEADER)
            in_office = (
                office_holder(office)
                if office is not None and office.revision == record.stamp
                else None
            )
            applied = record.state(in_office).publish(assignment, fence)
            if not applied.accepted:
                raise FencedError(applied.reason)
            published = replace(record, assignment=assignment, term=fence.term)
            try:
                await put(self.store, ASSIGNMENT, published.encode(), current)
                return
            except RevisionConflictError:
                continue  # a leader took office or published meanwhile: decide again

    async def current(self) -> Assignment | None:
        return (await read_record(self.store))[0].assignment

    async def watch(self) -> AsyncIterator[Assignment]:
        """The assignment now (when one is stored) and each newer one once."""
        seen: tuple[int, int] | None = None
        async for view, resynced in snapshots(self.store, parent(ASSIGNMENT)):
            if resynced:
                seen = None  # the store lost or compacted its history: follow what it holds
            stored = view.get(ASSIGNMENT)
            if stored is None:
                continue
            try:
                record = AssignmentRecord.decode(stored.value)
            except ValueError as exc:
                _log.warning("ignoring the stored assignment: %s", exc)
                continue
            if record.assignment is None:
                continue
            published = (record.term, record.assignment.generation)
            if supersedes(published, seen):
                seen = published
                yield record.assignment


def _hold(partition: Partition, entry: KeyValue) -> Hold:
    stored = decode_hold(entry.value)
    return Hold(partition, stored.member_id, stored.generation, entry.revision)


def _hold_state(partition: Partition, current: KeyValue | None) -> CoordinationState:
    return CoordinationState(
        holds={} if current is None else {partition: _hold(partition, current)}
    )


def _holds(entries: Mapping[str, KeyValue]) -> dict[Partition, Hold]:
    holds: dict[Partition, Hold] = {}
    for key, entry in entries.items():
        partition = int(key.removeprefix(HOLDS))
        try:
            holds[partition] = _hold(partition, entry)
        except ValueError as exc:
            _log.warning("ignoring the hold at %s: %s", key, exc)
    return dict(sorted(holds.items()))


class StoreHoldStore(StoreAdapter):
    """The ``HoldStore`` port over a ``CoordinationStore``."""

    async def holds(self) -> Mapping[Partition, Hold]:
        listing = await self.store.list_prefix(HOLDS)
        return _holds({entry.key: entry for entry in listing.entries})

    async def watch_holds(self) -> AsyncIterator[Mapping[Partition, Hold]]:
        last: Mapping[Partition, Hold] | None = None
        async for view, _ in snapshots(self.store, HOLDS):
            holds = _holds(view)
            if holds != last:
                last = holds
                yield holds

    async def claim(
        self, partition: Partition, member_id: MemberId, generation: int, replacing: Hold | None
    ) -> bool:
        replaced = replaced_version(partition, replacing)
        key = hold_key(partition)
        current = await self.store.get(key)
        state = _hold_state(partition, current)
        # version 0: the store's revision, once written
        applied = state.claim(partition, member_id, generation, replacing=replaced, version=0)
        if not applied.accepted:
            return False
        try:
            await put(self.store, key, encode_hold(member_id, generation).encode(), current)
        except RevisionConflictError:
            return False  # the hold it decided on changed meanwhile: refused as the model would
        return True

    async def release(self, partition: Partition, member_id: MemberId) -> None:
        key = hold_key(partition)
        while True:
            current = await self.store.get(key)
            state = _hold_state(partition, current)
            if not state.release(partition, member_id).accepted:
                return
            assert current is not None  # released only what is held
            try:
                await self.store.delete(key, revision=current.revision)
                return
            except RevisionConflictError:
                continue


class StoreProjectRegistry(StoreAdapter):
    """The ``ProjectRegistry`` port over a ``CoordinationStore``."""

    async def register(
        self,
        partition: Partition,
        project_ids: Sequence[str],
        *,
        now: float,
        ttl: float,
        cap: int,
    ) -> Registration:
        ids = registration_ids(project_ids, ttl=ttl, cap=cap)
        if not ids:
            return Registration()
        prefix = projects_prefix(partition)
        while True:
            stored = await self._stored(prefix)
            before = CoordinationState(
                projects={partition: {p: expiry for p, (expiry, _) in stored.items()}}
            )
            after = before.register_projects(partition, ids, now=now, ttl=ttl, cap=cap).state
            kept = after.projects.get(partition, {})
            try:
                for project_id, (_, entry) in stored.items():
                    if project_id not in kept:  # expired: dropped, as the model drops it
                        await self.store.delete(entry.key, revision=entry.revision)
                for project_id in ids:
                    expiry, old = kept.get(project_id), stored.get(project_id)
                    if expiry is None or (old is not None and old[0] == expiry):
                        continue
                    key, value = prefix + encode_segment(project_id), repr(expiry).encode()
                    await put(self.store, key, value, None if old is None else old[1])
            except RevisionConflictError:
                continue  # another registrant wrote the partition meanwhile: decide again
            return registration(before, after, partition, ids, now)

    async def projects(self, partition: Partition, *, now: float) -> frozenset[str]:
        stored = await self._stored(projects_prefix(partition))
        return frozenset(p for p, (expiry, _) in stored.items() if expiry > now)

    async def _stored(self, prefix: str) -> dict[str, tuple[float, KeyValue]]:
        """Each registration under ``prefix``: its expiry and its key as listed."""
        stored: dict[str, tuple[float, KeyValue]] = {}
        for entry in (await self.store.list_prefix(prefix)).entries:
            try:
                expiry = float(entry.value)
            except ValueError:  # unreadable: as if expired, so the next registration drops it
                _log.warning(
                    "the registration at %s is unreadable: %r", entry.key, entry.value[:40]
                )
                expiry = -math.inf
            stored[decode_segment(entry.key.removeprefix(prefix))] = (expiry, entry)
        return stored
