"""``KafkaAssignmentStore``, ``KafkaHoldStore``, ``KafkaProjectRegistry``: the assignment,
holds and projects in the coordination log.

Every write is a request appended to ``shoal.{group}.coord-log`` and decided by replay (see
``_coord_log``): ``publish`` is accepted only under the term the log's last ``lead`` named
(a resigned or superseded leader is fenced) and for a higher generation; ``claim`` is a
compare-and-set on the hold's version (the offset of the claim that made it); ``release``
and ``register`` likewise. Reads first catch up with the log's end, so a read sees
every write confirmed before it (from any process).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping, Sequence

import anyio

from adapters._json import assignment_to_json
from adapters.kafka._coord_base import KafkaCoordinationAdapter
from adapters.kafka._coord_log import CoordLog
from adapters.kafka._settings import KafkaSettings
from core.coordination import (
    Hold,
    Leader,
    Registration,
    registration,
    registration_ids,
    replaced_version,
    unseen,
)
from core.errors import FencedError, StoreUnavailableError
from core.model import Assignment, MemberId, Partition
from core.retry import retry_delay

__all__ = ["KafkaAssignmentStore", "KafkaHoldStore", "KafkaProjectRegistry"]

_log = logging.getLogger("shoal.adapters.kafka.coord")
_COMPACT_ATTEMPTS = 8


class KafkaLogAdapter(KafkaCoordinationAdapter):
    """A coordination adapter that tails the coordination log (``_coord_log``)."""

    def __init__(self, settings: KafkaSettings | None = None) -> None:
        super().__init__(settings)
        self.log = CoordLog(self.settings, self.names.log_topic, on_change=self.changes.notify)

    async def _open(self) -> None:
        await self.log.start(self.tasks)
        await self.log.sync()

    async def _close(self) -> None:
        await self.log.stop()


class KafkaAssignmentStore(KafkaLogAdapter):
    """The ``AssignmentStore`` port on the Kafka coordination log. Use as ``async with``.

    Every method raises ``StoreUnavailableError`` when Kafka does not answer in time; a
    write that timed out may or may not have been applied. The leader's store (the one
    that publishes) also compacts the log once it is long (``CoordLog.compact``), in the
    background: a publish never waits for it.
    """

    def __init__(self, settings: KafkaSettings | None = None) -> None:
        super().__init__(settings)
        self._compacting = False

    async def publish(self, assignment: Assignment, fence: Leader) -> None:
        outcome = await self.log.request(
            "publish",
            id=fence.leader_id,
            inc=fence.incarnation,
            term=fence.term,
            assignment=assignment_to_json(assignment),
        )
        if not outcome.accepted:
            raise FencedError(outcome.reason)
        if not self._compacting and self.log.due_for_compaction():
            self._compacting = True
            self.tasks.start_soon(self._compact)

    async def _compact(self) -> None:
        """Snapshot attempts until one is consistent: around a publish, handlers' claims
        and releases arrive in a burst and may follow a snapshot's ``upto``."""
        try:
            for attempt in range(1, _COMPACT_ATTEMPTS + 1):
                if await self.log.compact(self.admin) is not None:
                    return
                await anyio.sleep(retry_delay(attempt, base=0.5, cap=8.0))
            _log.info("coordination log not compacted yet: the next publish tries again")
        except StoreUnavailableError as exc:
            _log.warning("coordination log not compacted (the next publish retries): %s", exc)
        finally:
            self._compacting = False

    async def current(self) -> Assignment | None:
        await self.log.sync()
        return self.log.state.model.assignment

    async def watch(self) -> AsyncIterator[Assignment]:
        """The stored assignment, then every newer generation in order (the last 256 are
        kept for a watcher that falls behind). Survives broker restarts (the reader
        reconnects and resumes from its position)."""
        last: int | None = None
        state = self.log.state
        while True:
            changed = self.changes.event()
            for assignment in unseen(list(state.history), last):
                last = assignment.generation
                yield assignment
            await changed.wait()


class KafkaHoldStore(KafkaLogAdapter):
    """The ``HoldStore`` port on the Kafka coordination log: the handoff lock of each partition."""

    async def holds(self) -> Mapping[Partition, Hold]:
        await self.log.sync()
        return dict(sorted(self.log.state.model.holds.items()))

    async def watch_holds(self) -> AsyncIterator[Mapping[Partition, Hold]]:
        last: dict[Partition, Hold] | None = None
        while True:
            changed = self.changes.event()
            holds = dict(sorted(self.log.state.model.holds.items()))
            if holds != last:
                last = holds
                yield dict(holds)
            await changed.wait()

    async def claim(
        self, partition: Partition, member_id: MemberId, generation: int, replacing: Hold | None
    ) -> bool:
        replaced = replaced_version(partition, replacing)
        outcome = await self.log.request(
            "claim", p=partition, member=member_id, generation=generation, replacing=replaced
        )
        return outcome.accepted

    async def release(self, partition: Partition, member_id: MemberId) -> None:
        hold = self.log.state.model.holds.get(partition)
        if hold is None or hold.member_id != member_id:
            await self.log.sync()  # maybe we have not read it yet
            hold = self.log.state.model.holds.get(partition)
            if hold is None or hold.member_id != member_id:
                return
        await self.log.request("release", p=partition, member=member_id)


class KafkaProjectRegistry(KafkaLogAdapter):
    """The ``ProjectRegistry`` port on the Kafka coordination log: the projects seen on
    each partition, with their expiry. A batch the replayed state shows would be refused
    whole (the partition is at its cap and none of them is live) appends nothing, so a
    flood of new project ids stops adding to the log at the cap."""

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
        model = self.log.state.model
        # what the log would decide on the state replayed so far: the state after it
        # can only hold more (other registrants), so a batch refused whole here is too
        expected = model.register_projects(partition, ids, now=now, ttl=ttl, cap=cap)
        if not ids or registration(model, expected.state, partition, ids, now).refused == set(ids):
            return Registration(refused=frozenset(ids))
        outcome = await self.log.request(
            "projects", p=partition, projects=ids, now=now, ttl=ttl, cap=cap
        )
        return registration(model, outcome.state, partition, ids, now)

    async def projects(self, partition: Partition, *, now: float) -> frozenset[str]:
        await self.log.sync()
        return self.log.state.model.live_projects(partition, now)
