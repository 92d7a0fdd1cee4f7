"""``KafkaCoordinationStore``: the ``CoordinationStore`` port on one Kafka partition.

Kafka has no compare-and-set and no leases, but one partition is a total order that every
reader sees alike. So every write is a request appended to ``shoal.{group}.kv`` (one
partition, kept by time forever, stamped by the broker: ``LogAppendTime``) and every reader
replays the log into a ``KeySpace`` (``adapters._keyspace``) with the same rules: a
request's outcome is decided by its position, identically everywhere, and its writer
reads up to its own record to learn it. (Kafka's own KRaft controllers keep broker
registrations and fencing the same way, as records of one log.)

Time is the log's: the broker's append time of the latest record. A record at offset ``o``
first ends the leases whose deadline that time has reached (their keys' deletions get
revision ``2o+1``), then applies its request (revision ``2o+2``; a lease granted there is
lease ``o+1``). A renewal that reaches the log after its lease's deadline finds it ended,
as on etcd. When nobody writes, the log's time stands still: so every open store appends a
``tick`` once its estimate of the broker's time passes the nearest lease deadline (an
estimate that never runs ahead of the broker: the time of the last record read plus the
time since it was read), and an expired lease ends, with its keys, within about
``tick_interval`` of its deadline.

Compaction: renewals and writes grow the log. The store that appended a record at offset
``k * compact_records - 1`` then snapshots the space it replayed up to some
offset U (``snapshot {upto: U, ...}``) and, once the snapshot is stored, deletes every
record before U. A reader that starts at an offset above 0 keeps what it reads until the
snapshot whose ``upto`` is that offset, loads it and replays what it kept: a state is never
guessed.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import time
import uuid
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from typing import Any

import anyio

from adapters._keyspace import KeySpace
from adapters._lease import check_ttl
from adapters._lifecycle import Lifecycle
from adapters.kafka._admin import create_topics
from adapters.kafka._aiokafka import (
    AIOKafkaAdminClient,
    KafkaError,
    NewTopic,
    RecordsToDelete,
    TopicPartition,
)
from adapters.kafka._kv_settings import KafkaKvSettings
from adapters.kafka._login import check_login, reaching
from adapters.kafka._tail import Appender, TopicTail
from core.errors import LeaseLostError, RevisionConflictError, StoreUnavailableError
from core.keyspace import KeyChange, KeyValue, Listing, Resync, check_key, check_prefix

__all__ = ["KafkaCoordinationStore"]

_log = logging.getLogger("shoal.adapters.kafka.kv")
_REFUSALS: dict[str, type[Exception]] = {
    "conflict": RevisionConflictError,
    "lease": LeaseLostError,
}


@dataclass(frozen=True, slots=True)
class _Outcome:
    value: int = 0  # the write's revision, or the granted lease
    refused: str = ""  # a key of _REFUSALS
    why: str = ""


@dataclass(slots=True)
class _Replica:
    """The log replayed: ``space`` None while the state is unknown (the records read start
    past the last one applied, and the snapshot of that start is not read yet; ``kept``
    holds what was read since)."""

    history: int
    space: KeySpace | None = None
    clock: float = 0.0  # the log's time, seconds: the latest broker timestamp read
    start: int = 0  # the offset the state was (re)started from
    next: int = 0
    kept: list[tuple[int, float, dict[str, Any]]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.space = KeySpace(history=self.history)  # an empty log: known, empty

    def apply(self, offset: int, stamp: float, raw: bytes) -> list[tuple[str, _Outcome]]:
        """Apply the record at ``offset``: the request ids decided with it and their
        outcomes (none while the state is unknown; every kept one once it is loaded).
        ``ValueError`` when the record is malformed: it decides nothing, though the
        leases its time has passed may have ended first (alike on every reader)."""
        if offset != self.next:  # records before it were deleted (compaction)
            _log.info("the log continues at %d, not %d: loading its snapshot", offset, self.next)
            self.start, self.kept, self.space = offset, [], None
        self.next = offset + 1
        try:
            record = json.loads(raw)
            op = record["op"]
            if self.space is None:
                if op == "snapshot" and record["upto"] == self.start:
                    return self._load(offset, record)
                self.kept.append((offset, stamp, record))
                return []
            return [(str(record["rid"]), self._decide(self.space, offset, stamp, record))]
        except (KeyError, TypeError, AttributeError, binascii.Error) as exc:
            raise ValueError(f"malformed record: {exc!r}") from exc

    def _load(self, offset: int, snapshot: dict[str, Any]) -> list[tuple[str, _Outcome]]:
        space = self.space = KeySpace.restored(snapshot["image"], history=self.history)
        self.clock = float(snapshot["clock"])
        kept, self.kept = self.kept, []
        _log.info("the log's state loaded from the snapshot at offset %d", offset)
        return [(str(r["rid"]), self._decide(space, at, when, r)) for at, when, r in kept]

    def _decide(
        self, space: KeySpace, offset: int, stamp: float, record: dict[str, Any]
    ) -> _Outcome:
        self.clock = max(self.clock, stamp)
        space.expire(now=self.clock, revision=2 * offset + 1)
        revision, op = 2 * offset + 2, record["op"]
        try:
            if op == "create":
                value = space.create(
                    record["key"], _bytes(record), record["lease"], revision=revision
                )
            elif op == "update":
                value = space.update(
                    record["key"],
                    _bytes(record),
                    record["lease"],
                    expected=record["expected"],
                    revision=revision,
                )
            elif op == "delete":
                value = space.delete(record["key"], expected=record["expected"], revision=revision)
            elif op == "grant":
                value = offset + 1
                space.grant(value, float(record["ttl"]), now=self.clock)
            elif op == "keep":
                space.keep_alive(record["lease"], now=self.clock)
                value = 0
            elif op == "revoke":
                space.revoke(record["lease"], revision=revision)
                value = 0
            else:  # a tick, or a snapshot of a state this replica knows already
                value = 0
        except RevisionConflictError as exc:
            return _Outcome(refused="conflict", why=str(exc))
        except LeaseLostError as exc:
            return _Outcome(refused="lease", why=str(exc))
        return _Outcome(value)


def _bytes(record: dict[str, Any]) -> bytes:
    return base64.b64decode(record["value"])


class KafkaCoordinationStore(Lifecycle):
    """Use it as ``async with``; every open store ticks the log's time (module doc)."""

    def __init__(self, settings: KafkaKvSettings | None = None, *, history: int = 1024) -> None:
        self.settings = settings if settings is not None else KafkaKvSettings()
        self.topic = self.settings.topic
        self._kafka = self.settings.connection()
        self._replica = _Replica(history)
        self._read_at = time.monotonic()  # when the latest record was applied here
        self._appender = Appender(self._kafka, self.topic)
        self._tail = TopicTail(self._kafka, self.topic, self._on_record)
        self._waiting: dict[str, _Outcome | None] = {}
        self._compact_due = anyio.Event()
        self._admin: Any = None

    # --- lifecycle -------------------------------------------------------------------------

    async def _connect(self) -> None:
        s = self._kafka
        with reaching(s, "Kafka coordination", StoreUnavailableError):
            try:
                await check_login(s)
            except PermissionError as exc:
                raise StoreUnavailableError(str(exc)) from exc
            self._admin = AIOKafkaAdminClient(
                client_id=f"{s.client_id}-kv-admin", **s.client_options()
            )
            await self._admin.start()
            await self._ensure_topic()
            await self._appender.start()
            await self._tail.start(self._tasks)
        self._tasks.start_soon(self._keep_time)

    async def _wind_down(self) -> None:
        with anyio.move_on_after(self.settings.close_timeout):
            await self._tail.stop()

    async def _disconnect(self) -> None:
        admin, self._admin = self._admin, None
        with anyio.move_on_after(self.settings.close_timeout):
            try:
                await self._appender.stop()
            finally:
                if admin is not None:
                    await admin.close()

    async def _ensure_topic(self) -> None:
        s = self._kafka
        if not s.create_topics:
            return
        topic = NewTopic(
            self.topic,
            1,
            s.replication_factor,
            topic_configs={
                "min.insync.replicas": str(s.min_insync_replicas),
                "cleanup.policy": "delete",
                "retention.ms": "-1",
                "retention.bytes": "-1",
                "message.timestamp.type": "LogAppendTime",
            },
        )
        await create_topics(self._admin, s, [topic])

    # --- keys ------------------------------------------------------------------------------

    async def get(self, key: str) -> KeyValue | None:
        return (await self._synced()).get(check_key(key))

    async def list_prefix(self, prefix: str) -> Listing:
        return (await self._synced()).listing(check_prefix(prefix))

    async def create(self, key: str, value: bytes, *, lease: int | None = None) -> int:
        return await self._request("create", key=check_key(key), value=_text(value), lease=lease)

    async def update(
        self, key: str, value: bytes, *, revision: int, lease: int | None = None
    ) -> int:
        return await self._request(
            "update", key=check_key(key), value=_text(value), expected=revision, lease=lease
        )

    async def delete(self, key: str, *, revision: int) -> int:
        return await self._request("delete", key=check_key(key), expected=revision)

    # --- leases ----------------------------------------------------------------------------

    async def grant(self, ttl: float) -> int:
        check_ttl(ttl)
        return await self._request("grant", ttl=ttl)

    async def keep_alive(self, lease: int) -> None:
        await self._request("keep", lease=lease)

    async def revoke(self, lease: int) -> None:
        await self._request("revoke", lease=lease)

    # --- watch -----------------------------------------------------------------------------

    async def watch(
        self, prefix: str, *, after: int | None = None
    ) -> AsyncGenerator[KeyChange | Resync, None]:
        check_prefix(prefix)
        while True:
            try:
                space = await self._synced()
                break
            except StoreUnavailableError as exc:
                _log.info("watch %r: the log is not readable yet, retrying: %s", prefix, exc)
                await anyio.sleep(self.settings.retry_interval)
        if after is None:
            listing = space.listing(prefix)
            after = listing.revision
            yield Resync(listing)
        while True:
            changed = self._tail.changed()
            current = self._replica.space
            pending = None if current is None else current.changes_after(after)
            if current is not None and pending is None:  # reloaded, or fell behind
                listing = current.listing(prefix)
                after = listing.revision
                yield Resync(listing)
                continue
            for change in pending or ():
                after = change.revision
                if change.key.startswith(prefix):
                    yield change
            if not pending:
                await changed.wait()

    # --- the log ---------------------------------------------------------------------------

    async def _synced(self) -> KeySpace:
        """The replica, once it applied every record stored before the call."""
        await self._tail.sync()
        space = self._replica.space
        if space is None:
            raise StoreUnavailableError(
                f"Kafka: {self.topic} starts at offset {self._replica.start} and its "
                "snapshot is not read yet"
            )
        return space

    async def _request(self, op: str, **fields: object) -> int:
        """Append a request; its outcome once replayed here (the refusal raised).
        ``StoreUnavailableError`` when not confirmed within ``request_timeout`` (it may
        or may not apply then)."""
        rid = uuid.uuid4().hex
        self._waiting[rid] = None
        try:
            offset = await self._append(op, rid=rid, **fields)
            timeout = self.settings.call_timeout
            with anyio.move_on_after(timeout):
                while (outcome := self._waiting[rid]) is None:
                    await self._tail.changed().wait()
                if outcome.refused:
                    raise _REFUSALS[outcome.refused](outcome.why)
                return outcome.value
            raise StoreUnavailableError(
                f"Kafka: {op} at {self.topic}@{offset} not read back within {timeout:g} s "
                "(it may or may not apply)"
            )
        finally:
            del self._waiting[rid]

    async def _append(self, op: str, **fields: object) -> int:
        record = json.dumps({"op": op, **fields}).encode()
        offset = await self._appender.append(op.encode(), record)
        if (offset + 1) % self.settings.compact_records == 0:
            self._compact_due.set()
        return offset

    def _on_record(self, offset: int, key: bytes | None, value: bytes | None) -> None:
        self._read_at = time.monotonic()
        if value is None:
            return
        for rid, outcome in self._replica.apply(offset, self._tail.timestamp / 1000, value):
            if rid in self._waiting:
                self._waiting[rid] = outcome

    async def _keep_time(self) -> None:
        """Tick the log's time past due lease deadlines; compact when this store's record
        crossed the threshold (module doc)."""
        while True:
            with anyio.move_on_after(self.settings.tick_interval):
                await self._compact_due.wait()
            try:
                if self._compact_due.is_set():
                    self._compact_due = anyio.Event()
                    await self._compact()
                space = self._replica.space
                now = self._replica.clock + (time.monotonic() - self._read_at)
                if space is not None and space.next_deadline() <= now:
                    await self._append("tick", rid="")
            except StoreUnavailableError as exc:
                _log.info("keeping the log's time: %s", exc)

    async def _compact(self) -> None:
        await self._tail.sync()
        replica = self._replica
        if replica.space is None:
            return
        upto = replica.next
        image = replica.space.image()
        await self._append("snapshot", rid="", upto=upto, clock=replica.clock, image=image)
        try:
            with anyio.fail_after(self.settings.call_timeout):
                await self._admin.delete_records(
                    {TopicPartition(self.topic, 0): RecordsToDelete(before_offset=upto)}
                )
        except (TimeoutError, KafkaError) as exc:
            raise StoreUnavailableError(f"Kafka: DeleteRecords {self.topic}: {exc!r}") from exc
        _log.info(
            "%s compacted: the records before %d are deleted (a snapshot holds them)",
            self.topic,
            upto,
        )


def _text(value: bytes) -> str:
    return base64.b64encode(value).decode()
