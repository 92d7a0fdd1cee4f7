"""``NatsKvAssignmentStore``, ``NatsKvHoldStore``, ``NatsKvProjectRegistry``.

- ``assignment`` -> ``{generation, owners, term}`` JSON. ``publish`` reads the ``leader``
  key and checks the fence against it (its term, id and owner token), reads the assignment
  (the stored generation must be lower, the stored term not higher), then writes in one
  atomic batch that holds only if neither key's revision moved since
  (``Bucket.update_fenced``): a leader deposed between its check and its write is refused,
  as in etcd's one transaction. A renewal of the leader key moves its revision too; the
  publish then reads and checks again.
- ``holds.{p}`` -> ``{generation, member}`` JSON; the hold's version is the key's revision
  (``claim`` replacing a hold compares it).
- ``projects.{p}.{id}`` -> the registration's expiry (the registrant's clock, seconds), with
  a TTL that runs out then, so the server removes what is not refreshed; reads and the cap
  go by the expiry in the value, as the model does.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import aclosing

from adapters._json import StoredAssignment, decode_assignment, decode_hold, encode_assignment
from adapters._json import encode_hold as encode_hold_json
from adapters.natskv import _keys as keys
from adapters.natskv._base import NatsKvAdapter
from adapters.natskv._bucket import Entry
from adapters.natskv._election import decode_leader
from core.coordination import (
    Hold,
    Leader,
    Registration,
    admit_registrations,
    registration_ids,
    supersedes,
)
from core.errors import FencedError
from core.model import Assignment, MemberId, Partition

__all__ = ["NatsKvAssignmentStore", "NatsKvHoldStore", "NatsKvProjectRegistry"]

_log = logging.getLogger("shoal.adapters.natskv")


class NatsKvAssignmentStore(NatsKvAdapter):
    """The ``AssignmentStore`` port on NATS KV. Every method raises
    ``StoreUnavailableError`` when NATS does not answer in time (a write may or may not have
    been applied then)."""

    _watched = keys.ASSIGNMENT

    async def publish(self, assignment: Assignment, fence: Leader) -> None:
        """Store ``assignment`` if the leader key holds ``fence`` (term, id and owner token)
        and the stored generation is lower; ``FencedError`` otherwise (nothing stored)."""
        bucket, term = self._bucket, fence.term
        value = encode_assignment(assignment, term).encode()
        while True:
            fence_revision = await self._check_fence(fence)
            entry, last = await bucket.latest(keys.ASSIGNMENT)
            stored = self._decode(entry)
            if stored is not None:
                if stored.term > term:
                    raise FencedError(
                        f"term {term} is not current: term {stored.term} published already"
                    )
                if assignment.generation <= stored.assignment.generation:
                    raise FencedError(
                        f"generation {assignment.generation} is not above the stored generation "
                        f"{stored.assignment.generation} (published by term {stored.term})"
                    )
            written = await bucket.update_fenced(
                keys.ASSIGNMENT,
                value,
                last=last,
                fence=keys.LEADER,
                fence_revision=fence_revision,
                record=(keys.ASSIGNMENT_FENCE, f"{term}:{fence.leader_id}".encode()),
            )
            if written is not None:
                return
            # a renewal, a new leader or another publish came first: check everything again

    async def _check_fence(self, fence: Leader) -> int:
        """The revision of the leader key that holds ``fence``; ``FencedError`` when it
        does not hold it."""
        term = fence.term
        entry = await self._bucket.get(keys.LEADER)
        if entry is None:
            raise FencedError(f"term {term} is not current: nobody leads now")
        try:
            token, leader = decode_leader(entry)
        except ValueError as exc:
            raise FencedError(f"term {term} cannot be checked: {exc}") from exc
        if leader.term != term:
            raise FencedError(
                f"term {term} is not current: {leader.leader_id!r} leads with term {leader.term}"
            )
        if leader.leader_id != fence.leader_id or token != fence.incarnation:
            raise FencedError(
                f"term {term} is held by another leadership ({leader.leader_id!r}, "
                f"incarnation {token!r})"
            )
        return entry.revision

    async def current(self) -> Assignment | None:
        stored = self._decode(await self._bucket.get(keys.ASSIGNMENT))
        return None if stored is None else stored.assignment

    async def watch(self) -> AsyncIterator[Assignment]:
        """The stored assignment, then every newer one (``core.coordination.supersedes``);
        never an older or repeated one. Survives NATS restarts (re-reads on reconnect)."""
        last: tuple[int, int] | None = None

        async def read() -> StoredAssignment | None:
            return self._decode(await self._bucket.get(keys.ASSIGNMENT))

        async with aclosing(self._snapshots(read, "assignment")) as snapshots:
            async for stored in snapshots:
                if stored is None:
                    continue
                published = (stored.term, stored.assignment.generation)
                if supersedes(published, last):
                    last = published
                    yield stored.assignment

    @staticmethod
    def _decode(entry: Entry | None) -> StoredAssignment | None:
        if entry is None:
            return None
        try:
            return decode_assignment(entry.value)
        except ValueError as exc:
            _log.warning("NATS KV: ignoring the stored assignment: %s", exc)
            return None


class NatsKvHoldStore(NatsKvAdapter):
    """The ``HoldStore`` port on NATS KV: the handoff lock of each partition."""

    _watched = keys.HOLDS

    async def holds(self) -> Mapping[Partition, Hold]:
        holds: dict[Partition, Hold] = {}
        for key, entry in (await self._bucket.snapshot(keys.HOLDS)).items():
            try:
                partition = int(key.removeprefix(keys.HOLDS))
                stored = decode_hold(entry.value)
            except ValueError as exc:
                _log.warning("NATS KV: ignoring hold %s: %s", key, exc)
                continue
            holds[partition] = Hold(partition, stored.member_id, stored.generation, entry.revision)
        return dict(sorted(holds.items()))

    async def watch_holds(self) -> AsyncIterator[Mapping[Partition, Hold]]:
        """The whole hold map now and after every change; survives NATS restarts."""
        last: Mapping[Partition, Hold] | None = None
        async with aclosing(self._snapshots(self.holds, "holds")) as snapshots:
            async for holds in snapshots:
                if holds != last:
                    last = holds
                    yield dict(holds)

    async def claim(
        self, partition: Partition, member_id: MemberId, generation: int, replacing: Hold | None
    ) -> bool:
        """Create ``holds.{partition}`` if absent (``replacing`` None) or rewrite it if its
        revision is still ``replacing.version``. False, and nothing written, otherwise."""
        if replacing is not None and replacing.partition != partition:
            raise ValueError(f"cannot claim partition {partition} replacing a hold on {replacing}")
        key, value = keys.hold(partition), encode_hold_json(member_id, generation).encode()
        if replacing is None:
            return await self._bucket.create(key, value) is not None
        return await self._bucket.update(key, value, last=replacing.version) is not None

    async def release(self, partition: Partition, member_id: MemberId) -> None:
        """Delete ``holds.{partition}`` if ``member_id`` holds it (revision-compared)."""
        key = keys.hold(partition)
        while (entry := await self._bucket.get(key)) is not None:
            try:
                holder = decode_hold(entry.value).member_id
            except ValueError:
                return
            if holder != member_id or await self._bucket.delete(key, last=entry.revision):
                return


class NatsKvProjectRegistry(NatsKvAdapter):
    """The ``ProjectRegistry`` port on NATS KV. The cap is counted from one read of the
    partition's keys; the read and the writes are separate requests: the cap holds for
    the partition's owner, the one registrant."""

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
        # keys expire on the server, but one may outlive its expiry by the marker's delay
        live = {p: t for p, t in (await self._expiries(partition)).items() if t > now}
        registered, expiries = admit_registrations(
            ids, live, now=now, ttl=ttl, room=cap - len(live)
        )
        for project_id, until in expiries.items():
            await self._bucket.put(
                keys.project(partition, project_id), repr(until).encode(), ttl=until - now
            )
        return registered

    async def projects(self, partition: Partition, *, now: float) -> frozenset[str]:
        return frozenset(
            p for p, expiry in (await self._expiries(partition)).items() if expiry > now
        )

    async def _expiries(self, partition: Partition) -> dict[str, float]:
        prefix = keys.projects(partition)
        return {
            keys.decode_id(key.removeprefix(prefix)): _expiry(entry.value)
            for key, entry in (await self._bucket.snapshot(prefix)).items()
        }


def _expiry(value: bytes) -> float:
    """A registration's expiry; 0 (expired) for a value that is not one."""
    try:
        return float(value)
    except ValueError:
        return 0.0
