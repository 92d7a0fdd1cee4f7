"""``RedisAssignmentStore``, ``RedisHoldStore``, ``RedisProjectRegistry``: the assignment
(one key), partition holds and project sets.

- ``assignment`` -> ``{generation, owners, term}`` JSON; ``publish`` is one script that
  stores it only if the leader key's term equals the caller's and the stored generation
  is lower.
- ``holds`` is ONE hash, field ``{partition}`` -> ``{generation, member, version}``: the
  whole map is read atomically (``HGETALL``) and no key scan is needed. ``version`` is
  random per claim; ``claim`` compares the stored value with the one observed.
- ``projects:{p}`` is a sorted set: project id scored by the expiry of its registration;
  ``register`` (one script) drops the expired, refreshes the live and adds new ones while
  fewer than ``cap`` are live; the key itself expires a TTL after its last registration.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import aclosing

from adapters.redis._base import RedisAdapter
from adapters.redis._client import ms
from adapters.redis._codec import (
    StoredAssignment,
    decode_assignment,
    decode_hold,
    encode_assignment,
    encode_hold,
    new_version,
)
from adapters.redis._watch import watch_snapshots
from core.coordination import Hold, Leader, Registration, registration_ids, supersedes
from core.errors import FencedError
from core.model import Assignment, MemberId, Partition

__all__ = ["RedisAssignmentStore", "RedisHoldStore", "RedisProjectRegistry"]

_log = logging.getLogger(__name__)


class RedisAssignmentStore(RedisAdapter):
    """The ``AssignmentStore`` port on Redis. Use as ``async with RedisAssignmentStore(s) as a``.

    Every method raises ``StoreUnavailableError`` when Redis does not answer in time; a
    write that timed out may or may not have been applied.
    """

    async def publish(self, assignment: Assignment, fence: Leader) -> None:
        """Store ``assignment`` if the leader key still holds ``fence``'s owner token (its
        incarnation), term and id and the stored generation is lower. Raises ``FencedError``
        otherwise (nothing stored)."""
        keys = self._keys
        term = fence.term
        reply = await self._client.script(
            "PUBLISH",
            [keys.leader, keys.assignment, keys.events],
            [
                str(term),
                assignment.generation,
                encode_assignment(assignment, term),
                self.settings.events_maxlen,
                fence.incarnation,
                fence.leader_id,
            ],
        )
        status = int(reply[0])
        if status == 1:
            return
        if status == 0:
            raise FencedError(f"term {term} is not current: nobody leads now")
        if status in (-1, -3):
            leader = await self._client.get(keys.leader)
            who = leader.decode(errors="replace").split(":", 2)[-1] if leader else "?"
            if status == -3:
                raise FencedError(
                    f"term {term} is held by another leadership ({who!r}, or another owner "
                    "token): Redis handed the term out twice after losing writes"
                )
            raise FencedError(
                f"term {term} is not current: {who!r} leads with term {reply[1].decode()}"
            )
        raise FencedError(
            f"generation {assignment.generation} is not above the stored generation "
            f"{reply[1].decode()}"
        )

    async def current(self) -> Assignment | None:
        stored = await self._stored()
        return None if stored is None else stored.assignment

    async def watch(self) -> AsyncIterator[Assignment]:
        """The stored assignment, then newer ones (``core.coordination.supersedes``: a higher
        generation, or a higher term after Redis lost its data), in order; never an older or
        repeated one. Generations published faster than the watcher reads may be skipped
        (it re-reads the latest on each change). Survives Redis restarts (re-reads)."""
        feed = await self._started_feed()
        last: tuple[int, int] | None = None
        snapshots = watch_snapshots(
            self._client, feed, lambda c: c.topic == "assignment", self._stored, "assignment"
        )
        warned = -1
        async with aclosing(snapshots):
            async for stored in snapshots:
                if stored is None:
                    continue
                published = (stored.term, stored.assignment.generation)
                if supersedes(published, last):
                    if last is not None and published[1] < last[1]:
                        # publish only ever raises the stored generation: it went back
                        # because Redis lost its data; a newer term restarted the count
                        _log.error(
                            "redis: generation %d of term %d follows generation %d of term "
                            "%d: Redis lost its data (run it with appendonly yes); following "
                            "the new leader's assignment",
                            published[1],
                            published[0],
                            last[1],
                            last[0],
                        )
                    last = published
                    yield stored.assignment
                elif last is not None and published < last and warned != published[1]:
                    warned = published[1]
                    _log.error(
                        "redis: the stored assignment went back from generation %d to %d "
                        "without a newer term (%d): the key was deleted or overwritten; "
                        "this watch yields nothing until a newer one is published",
                        last[1],
                        published[1],
                        published[0],
                    )

    async def _stored(self) -> StoredAssignment | None:
        raw = await self._client.get(self._keys.assignment)
        if raw is None:
            return None
        try:
            return decode_assignment(raw)
        except ValueError as exc:
            _log.warning("redis: ignoring the stored assignment: %s", exc)
            return None


class RedisHoldStore(RedisAdapter):
    """The ``HoldStore`` port on Redis: the handoff lock of each partition."""

    async def holds(self) -> Mapping[Partition, Hold]:
        return self._decode_holds(await self._client.hgetall(self._keys.holds))

    async def watch_holds(self) -> AsyncIterator[Mapping[Partition, Hold]]:
        """The whole hold map now and after every change; survives Redis restarts."""
        feed = await self._started_feed()
        last: Mapping[Partition, Hold] | None = None
        snapshots = watch_snapshots(
            self._client, feed, lambda c: c.topic == "holds", self.holds, "holds"
        )
        async with aclosing(snapshots):
            async for holds in snapshots:
                if holds != last:
                    last = holds
                    yield dict(holds)

    async def claim(
        self, partition: Partition, member_id: MemberId, generation: int, replacing: Hold | None
    ) -> bool:
        """Set field ``partition`` of ``holds`` if absent (``replacing`` None) or still
        exactly ``replacing``. False, and nothing written, otherwise."""
        if replacing is not None and replacing.partition != partition:
            raise ValueError(f"cannot claim partition {partition} replacing a hold on {replacing}")
        expected = (
            ""
            if replacing is None
            else encode_hold(replacing.member_id, replacing.generation, replacing.version)
        )
        keys = self._keys
        claimed = await self._client.script(
            "CLAIM",
            [keys.holds, keys.events],
            [
                partition,
                encode_hold(member_id, generation, new_version()),
                expected,
                self.settings.events_maxlen,
            ],
        )
        return bool(claimed)

    async def release(self, partition: Partition, member_id: MemberId) -> None:
        """Delete field ``partition`` of ``holds`` if ``member_id`` holds it (checked in the
        script)."""
        keys = self._keys
        await self._client.script(
            "RELEASE_HOLD",
            [keys.holds, keys.events],
            [partition, member_id, self.settings.events_maxlen],
        )

    @staticmethod
    def _decode_holds(raw: Mapping[bytes, bytes]) -> dict[Partition, Hold]:
        holds: dict[Partition, Hold] = {}
        for field, value in raw.items():
            try:
                partition = int(field)
                holds[partition] = decode_hold(partition, value)
            except ValueError as exc:
                _log.warning("redis: ignoring hold %r: %s", field, exc)
        return dict(sorted(holds.items()))


class RedisProjectRegistry(RedisAdapter):
    """The ``ProjectRegistry`` port on Redis: the projects seen on each partition, with
    their expiry."""

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
        added, refused = await self._client.script(
            "REGISTER_PROJECTS",
            [self._keys.projects(partition)],
            [repr(now), repr(now + ttl), cap, max(1, ms(ttl)), *ids],
        )
        return Registration(
            added=frozenset(a.decode() for a in added),
            refused=frozenset(r.decode() for r in refused),
        )

    async def projects(self, partition: Partition, *, now: float) -> frozenset[str]:
        members = await self._client.script(
            "PROJECTS", [self._keys.projects(partition)], [repr(now)]
        )
        return frozenset(member.decode() for member in members)

    # --- decoding ------------------------------------------------------------------------
