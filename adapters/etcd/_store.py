"""``EtcdAssignmentStore``, ``EtcdHoldStore``, ``EtcdProjectRegistry``: the assignment (one
key), partition holds (``holds/{p}``) and project lists (``projects/{p}/{project}``).

The whole assignment is ONE key, ``assignment`` -> {generation, owners, term}: a txn is
limited to 128 operations by default (``--max-txn-ops``), and a generation must switch
atomically. ``publish`` is one txn guarded by the leader key's create revision (the term)
and by the assignment key's mod revision as read just before (so the generation check
cannot race another writer).
"""

from __future__ import annotations

import logging
import math
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping, Sequence
from contextlib import aclosing
from typing import TypeVar

from adapters.etcd._base import EtcdAdapter
from adapters.etcd._client import Entry
from adapters.etcd._codec import (
    StoredAssignment,
    decode_assignment,
    decode_hold,
    encode_assignment,
    encode_hold,
)
from adapters.etcd._settings import EtcdSettings
from adapters.etcd._watch import watch_snapshots
from core.coordination import (
    Hold,
    Leader,
    Registration,
    admit_registrations,
    registration_ids,
    supersedes,
)
from core.errors import FencedError, LeaseLostError
from core.model import Assignment, MemberId, Partition

__all__ = ["EtcdAssignmentStore", "EtcdHoldStore", "EtcdProjectRegistry"]

_log = logging.getLogger(__name__)
T = TypeVar("T")
_PERIODS_PER_TTL = 4  # registrations share one lease per quarter of their TTL
_SWEEPS_PER_TTL = 64  # at most one sweep of a partition's expired keys per 1/64 of the TTL
_MIN_LEASE_TTL = 2.0  # etcd rounds shorter leases up to 2 s
_MAX_TXN_OPS = 128  # etcd's default --max-txn-ops
_MAX_VALUE_BYTES = 1_500_000  # etcd's default --max-request-bytes is 1.5 MiB, less overhead


class EtcdAssignmentStore(EtcdAdapter):
    """The ``AssignmentStore`` port on etcd. Use as ``async with EtcdAssignmentStore(s) as a``.

    Every method raises ``StoreUnavailableError`` when etcd does not answer in time; a
    write that timed out may or may not have been applied.
    """

    async def publish(self, assignment: Assignment, fence: Leader) -> None:
        """Store ``assignment`` if ``fence``'s term is the create revision of the current
        leader key and its id the key's value (revisions are never reused, so etcd needs no
        incarnation) and the stored generation is lower. Raises ``FencedError`` otherwise,
        ``ValueError`` when the assignment is too large for one etcd request."""
        client, keys = self._client, self._keys
        term = fence.term
        value = encode_assignment(assignment, term)
        if len(value) > _MAX_VALUE_BYTES:
            raise ValueError(
                f"the assignment is {len(value)} bytes as JSON, more than etcd accepts in one "
                f"request by default (--max-request-bytes 1.5 MiB): use fewer partitions"
            )
        stored, _ = await client.get(keys.assignment)
        while True:
            current = self._decode_assignment(stored)
            if current is not None and assignment.generation <= current.assignment.generation:
                raise FencedError(
                    f"generation {assignment.generation} is not above the stored generation "
                    f"{current.assignment.generation} (published by term {current.term})"
                )
            result = await client.txn(
                [
                    client.created_at(keys.leader, term),
                    client.holds_value(keys.leader, fence.leader_id.encode()),
                    client.modified_at(
                        keys.assignment, 0 if stored is None else stored.mod_revision
                    ),
                ],
                [client.put_op(keys.assignment, value)],
                [client.get_op(keys.leader), client.get_op(keys.assignment)],
            )
            if result.succeeded:
                return
            leader, assignment_now = result.ranges
            if not leader:
                raise FencedError(f"term {term} is not current: nobody leads now")
            if leader[0].create_revision != term:
                raise FencedError(
                    f"term {term} is not current: {leader[0].value.decode()!r} leads "
                    f"with term {leader[0].create_revision}"
                )
            if leader[0].value != fence.leader_id.encode():
                raise FencedError(
                    f"term {term} is held by another leadership "
                    f"({leader[0].value.decode()!r}, not {fence.leader_id!r})"
                )
            stored = assignment_now[0] if assignment_now else None  # raced: check again

    async def current(self) -> Assignment | None:
        entry, _ = await self._client.get(self._keys.assignment)
        stored = self._decode_assignment(entry)
        return None if stored is None else stored.assignment

    async def watch(self) -> AsyncIterator[Assignment]:
        """The stored assignment, then every newer one (``core.coordination.supersedes``);
        never an older or repeated one. Survives etcd restarts (resumes after the last
        revision seen)."""
        key = self._keys.assignment
        last: tuple[int, int] | None = None
        async with aclosing(watch_snapshots(self._client, key, prefix=False)) as snapshots:
            async for snapshot in snapshots:
                stored = self._decode_assignment(snapshot.get(key))
                if stored is None:
                    continue
                published = (stored.term, stored.assignment.generation)
                if supersedes(published, last):
                    last = published
                    yield stored.assignment

    @staticmethod
    def _decode_assignment(entry: Entry | None) -> StoredAssignment | None:
        return None if entry is None else decode_assignment(entry.value)


class EtcdHoldStore(EtcdAdapter):
    """The ``HoldStore`` port on etcd: the handoff lock of each partition."""

    async def holds(self) -> Mapping[Partition, Hold]:
        entries, _ = await self._client.get_prefix(self._keys.holds)
        return self._decode_holds(entries)

    async def watch_holds(self) -> AsyncIterator[Mapping[Partition, Hold]]:
        """The whole hold map now and after every change; survives etcd restarts."""
        last: dict[Partition, Hold] | None = None
        prefix = self._keys.holds
        async with aclosing(watch_snapshots(self._client, prefix, prefix=True)) as snapshots:
            async for snapshot in snapshots:
                holds = self._decode_holds(snapshot.values())
                if holds != last:
                    last = holds
                    yield dict(holds)

    async def claim(
        self, partition: Partition, member_id: MemberId, generation: int, replacing: Hold | None
    ) -> bool:
        """Put ``holds/{partition}`` if absent (``replacing`` None) or still at
        ``replacing.version`` (its mod revision). False, and nothing written, otherwise."""
        if replacing is not None and replacing.partition != partition:
            raise ValueError(f"cannot claim partition {partition} replacing a hold on {replacing}")
        client, key = self._client, self._keys.hold(partition)
        compare = (
            client.created_at(key, 0)
            if replacing is None
            else client.modified_at(key, replacing.version)
        )
        result = await client.txn(
            [compare], [client.put_op(key, encode_hold(member_id, generation))]
        )
        return result.succeeded

    async def release(self, partition: Partition, member_id: MemberId) -> None:
        """Delete ``holds/{partition}`` if ``member_id`` holds it (checked in the txn)."""
        client, key = self._client, self._keys.hold(partition)
        entry, _ = await client.get(key)
        while entry is not None:
            hold = self._decode_hold(entry)
            if hold is None or hold.member_id != member_id:
                return
            result = await client.txn(
                [client.modified_at(key, entry.mod_revision)],
                [client.delete_op(key)],
                [client.get_op(key)],
            )
            if result.succeeded:
                return
            (now,) = result.ranges
            entry = now[0] if now else None

    def _decode_hold(self, entry: Entry) -> Hold | None:
        try:
            partition = int(entry.key.removeprefix(self._keys.holds))
            stored = decode_hold(entry.value)
        except ValueError as exc:
            _log.warning("etcd: ignoring hold %s: %s", entry.key, exc)
            return None
        return Hold(partition, stored.member_id, stored.generation, version=entry.mod_revision)

    def _decode_holds(self, entries: Iterable[Entry]) -> dict[Partition, Hold]:
        holds = (self._decode_hold(entry) for entry in entries)
        return {
            hold.partition: hold
            for hold in sorted((h for h in holds if h is not None), key=lambda h: h.partition)
        }


class EtcdProjectRegistry(EtcdAdapter):
    """The ``ProjectRegistry`` port on etcd: ``projects/{p}/{project}`` -> its expiry
    (seconds, the registrant's clock, as ASCII), the key on a lease shared by every
    registration written in the same period (a quarter of the TTL): one lease per period,
    not one per key, living ``ttl`` + a period, so etcd deletes a key that was not
    refreshed about a period after its expiry. Reads and the cap go by the expiry in the
    value, as the model does.

    The cap: keys are counted (``count_only``); a batch that would pass ``cap`` first
    deletes the partition's expired keys (reading them all), once something may have
    expired since the last such sweep and at most once per 1/64 of the TTL, then adds new
    projects only into the room left. Between sweeps, keys expired but not yet deleted by
    their lease still count: the cap errs on the side of refusing. The count and the puts
    are separate requests: the cap holds for the partition's owner, the one registrant.
    """

    def __init__(self, settings: EtcdSettings | None = None) -> None:
        super().__init__(settings)
        self._lease_of: dict[tuple[float, int], int] = {}  # (ttl, period number) -> lease
        self._first_expiry: dict[Partition, float] = {}  # earliest expiry written or kept
        self._swept_at: dict[Partition, float] = {}  # the registrant's clock at the last sweep

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
        client, prefix = self._client, self._keys.projects(partition)
        stored = await self._expiries(partition, ids)
        missing = [i for i in ids if i not in stored]
        count = await client.count_prefix(prefix)
        if count + len(missing) > cap and self._sweep_due(partition, now, ttl):
            kept = await self._sweep(partition, now)
            stored = {i: kept[i] for i in ids if i in kept}
            count = len(kept)
        # a key still stored (even expired, not yet swept) is counted already
        registered, expiries = admit_registrations(ids, stored, now=now, ttl=ttl, room=cap - count)
        writes = list(expiries.items())
        await self._put(partition, writes, now=now, ttl=ttl)
        return registered

    async def projects(self, partition: Partition, *, now: float) -> frozenset[str]:
        prefix = self._keys.projects(partition)
        entries, _ = await self._client.get_prefix(prefix)
        return frozenset(
            entry.key.removeprefix(prefix) for entry in entries if _expiry(entry.value) > now
        )

    async def _expiries(self, partition: Partition, ids: Sequence[str]) -> dict[str, float]:
        """The stored expiry of each of ``ids`` that has a key."""
        client, found = self._client, {}
        for chunk in _chunks(ids):
            keys = [self._keys.project(partition, i) for i in chunk]
            result = await client.txn([], [client.get_op(key) for key in keys])
            for project_id, entries in zip(chunk, result.ranges, strict=True):
                if entries:
                    found[project_id] = _expiry(entries[0].value)
        return found

    def _sweep_due(self, partition: Partition, now: float, ttl: float) -> bool:
        """Something may have expired since the last sweep, which was long enough ago (a
        flood at the cap would otherwise read the whole partition for every batch)."""
        return (
            now >= self._first_expiry.get(partition, -math.inf)
            and now >= self._swept_at.get(partition, -math.inf) + ttl / _SWEEPS_PER_TTL
        )

    async def _sweep(self, partition: Partition, now: float) -> dict[str, float]:
        """Delete the partition's keys expired at ``now`` (each only if unchanged since
        read); every key left, with its expiry as read."""
        client, prefix = self._client, self._keys.projects(partition)
        entries, _ = await client.get_prefix(prefix)
        kept: dict[str, float] = {}
        expired: list[Entry] = []
        for entry in entries:
            expiry = _expiry(entry.value)
            if expiry > now:
                kept[entry.key.removeprefix(prefix)] = expiry
            else:
                expired.append(entry)
        for chunk in _chunks(expired):
            compares = [client.modified_at(e.key, e.mod_revision) for e in chunk]
            result = await client.txn(compares, [client.delete_op(e.key) for e in chunk])
            if not result.succeeded:  # one changed meanwhile: all are left (next sweep)
                kept.update({e.key.removeprefix(prefix): _expiry(e.value) for e in chunk})
        self._first_expiry[partition] = min(kept.values(), default=math.inf)
        self._swept_at[partition] = now
        if expired:
            _log.info(
                "etcd: %d expired project registrations of partition %d deleted",
                len(expired),
                partition,
            )
        return kept

    async def _put(
        self, partition: Partition, writes: Sequence[tuple[str, float]], *, now: float, ttl: float
    ) -> None:
        if not writes:
            return
        client = self._client
        for attempt in (1, 2):
            lease = await self._lease(now, ttl)
            try:
                for chunk in _chunks(writes):
                    ops = [
                        client.put_op(self._keys.project(partition, i), repr(e).encode(), lease)
                        for i, e in chunk
                    ]
                    await client.txn([], ops)
                break
            except LeaseLostError:  # the period's lease expired (a long pause): a new one
                self._lease_of = {k: v for k, v in self._lease_of.items() if v != lease}
                if attempt == 2:
                    raise
        first = min(e for _, e in writes)
        self._first_expiry[partition] = min(self._first_expiry.get(partition, math.inf), first)

    async def _lease(self, now: float, ttl: float) -> int:
        """The lease of the current period: granted for ``ttl`` + a period, so it outlives
        every expiry written on it."""
        period = ttl / _PERIODS_PER_TTL
        slot = (ttl, math.floor(now / period))
        lease = self._lease_of.get(slot)
        if lease is None:
            lease = await self._client.grant(max(_MIN_LEASE_TTL, ttl + period))
            self._lease_of = {k: v for k, v in self._lease_of.items() if k[0] != ttl}
            self._lease_of[slot] = lease
        return lease

    # --- decoding ------------------------------------------------------------------------


def _expiry(value: bytes) -> float:
    """A registration's expiry; 0 (expired) for a key of an older version (no expiry)."""
    try:
        return float(value)
    except ValueError:
        return 0.0


def _chunks(items: Sequence[T]) -> Iterator[Sequence[T]]:
    for start in range(0, len(items), _MAX_TXN_OPS):
        yield items[start : start + _MAX_TXN_OPS]
