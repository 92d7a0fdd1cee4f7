"""``KafkaTransport``: the Transport port on Apache Kafka (see the package docstring)."""

from __future__ import annotations

import asyncio
import functools
import json
import logging
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, ClassVar, TypeVar

import anyio
import anyio.lowlevel

from adapters._batched import Batched
from adapters._dead_letter import DeadLetterHook, log_dead_letter
from adapters._lifecycle import Lifecycle
from adapters.kafka._admin import committed, ensure_topics
from adapters.kafka._aiokafka import (
    AIOKafkaAdminClient,
    AIOKafkaConsumer,
    AIOKafkaProducer,
    KafkaError,
    TopicPartition,
    stop_quietly,
)
from adapters.kafka._codec import encode
from adapters.kafka._dead_letter import DeadLetters
from adapters.kafka._login import check_login
from adapters.kafka._reader import Readers
from adapters.kafka._settings import KafkaSettings
from adapters.kafka._settlements import Settlements
from adapters.kafka._subscription import KafkaSubscription
from core.errors import BrokerUnavailableError, PublishError
from core.messages import Envelope, is_valid_project_id
from core.model import Partition
from core.packing import packed
from core.partitioning import partition_for
from core.ports import Subscription, TransportFeatures

__all__ = ["KafkaTransport", "kafka_partitioner"]

log = logging.getLogger("shoal.adapters.kafka")

T = TypeVar("T")

# A transaction's markers are written after EndTxn returns, and the next commit's
# AddOffsetsToTxn is refused (CONCURRENT_TRANSACTIONS, KAFKA-5477) until they are: with
# aiokafka's retry backoff of 100 ms every commit took 115 ms, with 10 ms it takes 17 ms
# (a plain OffsetCommit: 11 ms), measured on the local broker.
_COMMIT_RETRY_BACKOFF = 0.01
# The oldest unacked record's timestamp is all a peek needs: the broker still returns a
# whole first batch when it is larger, but no more than that; a fetch serves up to 16
# partitions' peeks.
_PEEK_FETCH_BYTES = 64 * 1024
_PEEK_FETCH_PARTITIONS = 16


def kafka_partitioner(key: bytes | None, all_partitions: list[int], available: list[int]) -> int:
    """aiokafka partitioner: ``core.partitioning.partition_for`` of the key (the project id),
    so a record sent without an explicit partition lands where shoal would put it."""
    if key is None:
        return all_partitions[0]
    return all_partitions[partition_for(key.decode("utf-8", "replace"), len(all_partitions))]


class KafkaTransport(Lifecycle):
    """The Transport port on Kafka.

    ``async with KafkaTransport(settings) as t:`` connects (bounded by ``connect_timeout``),
    creates the topics when missing and checks the data topic's partition count, and
    starts the producer; leaving closes the open subscriptions (each commits), flushes the
    producer (bounded by ``close_timeout``) and disconnects. aiokafka reconnects by itself;
    every broker call is bounded by a timeout. ``dead_letter`` is awaited once per dead
    letter (see ``_dead_letter``).
    """

    features: ClassVar[TransportFeatures] = TransportFeatures(
        "kafka",
        competing_consumers="a Kafka partition has one committed offset per group, and "
        "competing consumers of one partition need share groups (KIP-932), which aiokafka "
        "does not support; use NATS, or the exclusive mode with more partitions",
        datacenters="Kafka clusters are the same shape, not built yet; use NATS",
    )

    def __init__(
        self,
        settings: KafkaSettings | None = None,
        *,
        dead_letter: DeadLetterHook | None = None,
        position: str | None = None,
    ) -> None:
        """``position`` names a position of one's own (a broadcast handler's,
        ``core.modes.position_of``): offsets are committed under its own group
        (``KafkaSettings.offsets_group_id``) instead of the group's."""
        settings = settings or KafkaSettings()
        if position is not None:
            settings = settings.model_copy(update={"position": position})
        self.settings = settings
        self._hook = dead_letter or log_dead_letter
        self._admin: Any = None
        self._log_id = ""  # the cluster id and topic, once started
        self._producer: Any = None
        self._probe: Any = None  # a group-less consumer for end/beginning offsets
        self._peek: Any = None  # a group-less consumer that reads records' timestamps
        self._peek_lock = anyio.Lock()
        # Concurrent per-partition reads (a new leader's backlog of every partition, a
        # handler opening its partitions) share one request per gathering.
        self._end_offsets = Batched(self._read_end_offsets)
        self._start_offsets = Batched(self._read_start_offsets)
        self._commits = Batched(self._read_commits)
        self._timestamps = Batched(self._read_timestamps)
        self._dead: DeadLetters | None = None
        self._subscriptions: set[KafkaSubscription] = set()
        self._readers = Readers(self._new_reader, settings.close_timeout)
        self._stored: OrderedDict[str, float] = OrderedDict()  # message id -> stored at
        self._coordinators: dict[str, int] = {}  # group id -> its coordinator's node id

    # -- lifecycle -------------------------------------------------------------------

    async def _connect(self) -> None:
        s = self.settings
        try:
            with anyio.fail_after(s.connect_timeout):
                await self._start()
        except TimeoutError:
            raise TimeoutError(
                f"Kafka at {s.bootstrap} not ready within {s.connect_timeout} s"
            ) from None
        except KafkaError as exc:
            raise ConnectionError(f"Kafka at {s.bootstrap}: {exc!r}") from exc

    async def _start(self) -> None:
        s = self.settings
        await check_login(s)
        common = s.client_options()
        self._admin = AIOKafkaAdminClient(client_id=f"{s.client_id}-admin", **common)
        await self._admin.start()
        await ensure_topics(self._admin, s)
        cluster = await self._admin.describe_cluster()
        self._log_id = f"kafka:{cluster.get('cluster_id') or 'unknown'}/{s.topic}"
        self._producer = AIOKafkaProducer(
            client_id=s.client_id,
            acks="all",
            enable_idempotence=True,
            linger_ms=s.ms(s.linger) if s.linger else 0,
            max_batch_size=s.max_batch_bytes,
            partitioner=kafka_partitioner,
            **common,
        )
        await self._producer.start()
        self._probe = AIOKafkaConsumer(
            client_id=f"{s.client_id}-probe", group_id=None, enable_auto_commit=False, **common
        )
        await self._probe.start()
        self._peek = AIOKafkaConsumer(
            client_id=f"{s.client_id}-peek",
            group_id=None,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            max_partition_fetch_bytes=_PEEK_FETCH_BYTES,
            fetch_max_bytes=_PEEK_FETCH_BYTES * _PEEK_FETCH_PARTITIONS,
            **common,
        )
        await self._peek.start()
        self._dead = DeadLetters(self._producer, s, self._hook)

    async def _disconnect(self) -> None:
        """Close the subscriptions (each commits), disconnect the admin and probe clients,
        then flush and stop the producer, each bounded by ``close_timeout``.

        A producer that cannot flush in time (the broker is gone) is abandoned: messages
        not confirmed by then were reported to publish() as not confirmed already."""
        admin, producer, probe, peek = self._admin, self._producer, self._probe, self._peek
        self._admin = self._producer = self._probe = self._peek = self._dead = None
        for sub in list(self._subscriptions):
            await sub.close()
        await self._readers.stop()
        for name, client, stop in (
            ("probe consumer", probe, "stop"),
            ("peek consumer", peek, "stop"),
            ("admin client", admin, "close"),
            ("producer", producer, "stop"),
        ):
            if client is None:
                continue
            with anyio.move_on_after(self.settings.close_timeout) as scope:
                await stop_quietly(client, stop, scope, f"Kafka {name}")
            if scope.cancelled_caught:
                log.warning(
                    "the Kafka %s did not stop within %s s", name, self.settings.close_timeout
                )
                if client is producer:
                    await _abandon(producer)

    def _new_reader(self, number: int) -> Any:
        s = self.settings
        return AIOKafkaConsumer(
            client_id=f"{s.client_id}-reader-{number}",
            group_id=None,  # offsets are committed by each partition's committer
            enable_auto_commit=False,
            # A position the log no longer holds is an error (``PositionGoneError``), not
            # a silent reset: the partition is opened again from its commit.
            auto_offset_reset="none",
            max_partition_fetch_bytes=s.fetch_max_bytes,
            max_poll_records=s.max_ack_pending,
            **s.client_options(),
        )

    @property
    def dead_letters(self) -> int:
        """How many dead letters this transport has handled since it was entered."""
        return self._dead.count if self._dead else 0

    # -- the port --------------------------------------------------------------------

    async def publish(self, envelopes: Sequence[Envelope]) -> None:
        """Send every envelope to its partition (``envelope.partition``: the same number as
        on NATS), the envelopes that share a subject as one record (a pack,
        ``core.packing``), and return once Kafka confirmed all of them (acks=all,
        idempotent producer); at most ``max_pending_sends`` records unconfirmed at a time.

        Kafka does not de-duplicate by message id (idempotence covers the producer's own
        retries only): a pack whose message ids this transport all stored within
        ``duplicate_window`` is not sent again, and subscriptions skip a message that still
        got in twice (see ``_subscription``). Raises ``ValueError`` before sending anything
        when an envelope cannot be encoded, ``PublishError`` naming how many messages were
        not confirmed within ``publish_timeout`` (those may still be stored: retry with the
        same ids).
        """
        if not envelopes:
            return
        producer = self._started(self._producer)
        s = self.settings
        records = [(pack, encode(pack, s.partitions)) for pack in packed(envelopes)]
        self._forget_stored(anyio.current_time())
        todo = [
            (pack, record)
            for pack, record in records
            if any(part.message_id not in self._stored for part in pack)
        ]
        if not todo:
            await anyio.lowlevel.checkpoint()
            return
        futures: dict[asyncio.Future[Any], Sequence[Envelope]] = {}
        pending: set[asyncio.Future[Any]] = set()
        error: BaseException | None = None
        unsent = sum(len(pack) for pack, _ in todo)
        try:
            with anyio.move_on_after(s.publish_timeout):
                for pack, record in todo:
                    if len(pending) >= s.max_pending_sends:
                        _, pending = await asyncio.wait(
                            pending, return_when=asyncio.FIRST_COMPLETED
                        )
                    fut = await producer.send(
                        s.topic,
                        record.value,
                        key=record.key,
                        partition=record.partition,
                        headers=record.headers,
                    )
                    futures[fut] = pack
                    pending.add(fut)
                    unsent -= len(pack)
                if pending:
                    await asyncio.wait(pending)
        except KafkaError as exc:
            error = exc
        finally:
            for fut in futures:
                if not fut.done():
                    fut.cancel()  # does not stop the send; only our wait for it
        failed = unsent
        stored_at = anyio.current_time()
        for fut, pack in futures.items():
            if fut.cancelled():
                failed += len(pack)
            elif (failure := fut.exception()) is not None:
                failed += len(pack)
                error = error or failure
            else:
                for part in pack:
                    self._stored[part.message_id] = stored_at
        self._trim_stored()
        if failed:
            reason = f"{error!r}" if error else f"no confirmation within {s.publish_timeout} s"
            raise PublishError(
                f"{failed} of {len(envelopes)} messages not confirmed by topic {s.topic}: {reason}"
            )

    async def open(self, partition: Partition, consumer_id: str) -> Subscription:
        """Subscribe to ``partition``: the transport's reader (one consumer for every
        partition it reads, ``_reader``) reads it from the committed offset (group
        ``offsets_group_id``) or the earliest one, and the partition's transactional
        producer commits (starting it fences every earlier subscriber's commits: see
        ``KafkaSubscription``). Broker errors and an unanswered
        broker raise ``BrokerUnavailableError``."""
        s = self.settings
        dead = self._started(self._dead)
        self._check_partition(partition)
        tp = TopicPartition(s.topic, partition)
        committer = AIOKafkaProducer(
            client_id=f"{s.client_id}-{consumer_id}-p{partition}-commits",
            transactional_id=f"{s.offsets_group_id}:{s.topic}:{partition}",
            **{**s.client_options(), "retry_backoff_ms": s.ms(_COMMIT_RETRY_BACKOFF)},
        )
        try:
            with anyio.fail_after(s.connect_timeout):
                await committer.start()  # the fence first: no earlier commit lands after it
                base, metadata = await self._committed(partition, check_start=True)
                settlements = Settlements.restore(base, metadata)
                reader = await self._readers.reader_for(tp, lambda: settlements.read_to)
        except BaseException as exc:
            with anyio.CancelScope(shield=True), anyio.move_on_after(s.close_timeout) as scope:
                await stop_quietly(committer, "stop", scope, "committer")
            if isinstance(exc, KafkaError | TimeoutError):
                raise BrokerUnavailableError(
                    f"Kafka: opening partition {partition}: {exc!r}"
                ) from exc
            raise
        log.debug("partition %d opened by %s at offset %d", partition, consumer_id, base)
        sub = KafkaSubscription(
            partition,
            consumer_id,
            consumer=reader.consumer,
            release=functools.partial(self._readers.release, reader, tp),
            committer=committer,
            tp=tp,
            settlements=settlements,
            settings=s,
            dead=dead,
            log_id=self._log_id,
            on_close=self._subscriptions.discard,
        )
        self._subscriptions.add(sub)
        return sub

    async def trim_landed(self, partitions: int) -> int:
        """0: Kafka never refuses a write for a full topic; its retention (age, size)
        deletes the oldest records, read or not (docs/limits.md)."""
        await anyio.lowlevel.checkpoint()
        return 0

    async def backlog(self, partition: Partition) -> int:
        """Stored messages not settled yet: the end offset minus the committed offset (the
        earliest offset before any commit), minus those settled out of order above it.
        Broker errors and an unanswered broker raise ``BrokerUnavailableError``."""
        try:
            end, settlements = await self._unsettled(partition)
        except BrokerUnavailableError:
            raise
        except (KafkaError, TimeoutError) as exc:
            raise BrokerUnavailableError(
                f"Kafka: backlog of partition {partition}: {exc!r}"
            ) from exc
        above = sum(1 for o in settlements.settled if o < end)
        return max(end - settlements.base - above, 0)

    async def oldest_unacked(self, partition: Partition) -> float | None:
        """The timestamp of the record at the committed offset (the lowest one not settled:
        see ``Settlements``), read by a group-less consumer that fetches from that offset;
        None when it is the log end. Broker errors and an unanswered broker raise
        ``BrokerUnavailableError``."""
        try:
            end, settlements = await self._unsettled(partition)
            if settlements.base >= end:
                return None
            return await self._timestamps.get((partition, settlements.base))
        except BrokerUnavailableError:
            raise
        except (KafkaError, TimeoutError) as exc:
            raise BrokerUnavailableError(
                f"Kafka: oldest unacked message of partition {partition}: {exc!r}"
            ) from exc

    async def _unsettled(self, partition: Partition) -> tuple[int, Settlements]:
        """The partition's end offset and its settlements as last committed."""
        self._check_partition(partition)
        end = await self._end_offsets.get(partition)
        base, metadata = await self._committed(partition, check_start=False)
        # A commit is a transaction: the group shows it once its markers are written, a
        # moment after the commit returned. This process's own subscription knows sooner.
        for sub in self._subscriptions:
            confirmed = sub.confirmed_commit() if sub.partition == partition else None
            if confirmed is not None and confirmed[0] >= base:
                base, metadata = confirmed
        return end, Settlements.restore(base, metadata)

    async def _read_timestamps(
        self, wanted: Sequence[tuple[Partition, int]]
    ) -> dict[tuple[Partition, int], float]:
        """(partition, offset) -> the timestamp of the record at that offset (of the
        earliest one stored when retention removed it); left out when the broker did not
        return it within the request timeout. Several partitions at a time: the peek
        consumer is assigned them, and left unassigned so it prefetches nothing between
        peeks. A partition asked at two offsets (a commit landed between two reads) is
        peeked again."""
        found: dict[tuple[Partition, int], float] = {}
        left = list(wanted)
        async with self._peek_lock:
            while left:
                offsets: dict[Partition, int] = {}
                for key in left:
                    offsets.setdefault(key[0], key[1])
                found |= await self._peek_at(offsets)
                left = [key for key in left if offsets[key[0]] != key[1]]
        return found

    async def _peek_at(self, offsets: dict[Partition, int]) -> dict[tuple[Partition, int], float]:
        s = self.settings
        peek = self._started(self._peek)
        tps = {TopicPartition(s.topic, p): p for p in offsets}
        found: dict[tuple[Partition, int], float] = {}
        try:
            peek.assign(list(tps))
            for tp, partition in tps.items():
                peek.seek(tp, offsets[partition])
            with anyio.move_on_after(s.request_timeout):
                while len(found) < len(tps):
                    got = await peek.getmany(timeout_ms=s.ms(s.request_timeout))
                    for tp, records in got.items():
                        if records:
                            key = (tps[tp], offsets[tps[tp]])
                            found.setdefault(key, int(records[0].timestamp) / 1000.0)
                            peek.pause(tp)  # the next fetches ask for the others only
        finally:
            peek.unsubscribe()
        return found

    async def reply_registration(self, partition: Partition, project_id: str, by: str) -> None:
        """Send ``{"project", "partition", "handler"}`` to the registration topic (key: the
        project id). Best effort: not awaited until stored; a failure is logged."""
        if not is_valid_project_id(project_id):
            raise ValueError(f"project_id {project_id!r} is not one safe subject token")
        producer = self._started(self._producer)
        s = self.settings
        body = json.dumps({"project": project_id, "partition": partition, "handler": by})
        try:
            with anyio.fail_after(s.request_timeout):
                fut = await producer.send(
                    s.registration_topic, body.encode(), key=project_id.encode()
                )
        except (KafkaError, TimeoutError) as exc:
            log.warning("registration reply for %s not sent: %r", project_id, exc)
            return
        fut.add_done_callback(_log_failure)

    # -- helpers ---------------------------------------------------------------------

    async def _committed(self, partition: Partition, *, check_start: bool) -> tuple[int, str]:
        """(offset, metadata) committed for ``partition``; before any commit (or, with
        ``check_start``, when the commit is below the log start: retention deleted those
        records) the earliest offset still in the log and no metadata. A commit above the
        log end (the topic was recreated, or an unclean election or a lost single replica
        cut the log's tail) counts as no commit: new records take the offsets the commit
        claims, and starting there would skip them without a trace, so everything still
        stored is read again (the landed table settles a reused offset only for the message
        its row holds: ``core.table``)."""
        got = await self._commits.get(partition)
        if got is not None:
            end = await self._end_offsets.get(partition)  # read after the commit: no race
            if got[0] > end:
                log.error(
                    "partition %d: committed offset %d is above the log end %d (the topic "
                    "was recreated, or the log lost its tail): reading the partition from "
                    "its start again, so no record stored under a reused offset is skipped",
                    partition,
                    got[0],
                    end,
                )
                got = None
        if got is not None and not check_start:
            return got
        start = await self._start_offsets.get(partition)
        if got is not None:
            offset, metadata = got
            if offset >= start:
                return offset, metadata
            log.warning(
                "partition %d: committed offset %d is below the log start %d "
                "(deleted by retention); starting at %d",
                partition,
                offset,
                start,
                start,
            )
        return start, ""

    async def _read_commits(
        self, partitions: Sequence[Partition]
    ) -> dict[Partition, tuple[int, str] | None]:
        s = self.settings
        got = await committed(
            self._started(self._admin),
            s.offsets_group_id,
            s.topic,
            list(partitions),
            within=s.request_timeout,
            backoff=s.retry_backoff,
            coordinators=self._coordinators,
        )
        return {p: got.get(p) for p in partitions}

    async def _read_end_offsets(self, partitions: Sequence[Partition]) -> dict[Partition, int]:
        probe = self._started(self._probe)
        return await self._offsets(probe.end_offsets, partitions)

    async def _read_start_offsets(self, partitions: Sequence[Partition]) -> dict[Partition, int]:
        probe = self._started(self._probe)
        return await self._offsets(probe.beginning_offsets, partitions)

    async def _offsets(self, read: Any, partitions: Sequence[Partition]) -> dict[Partition, int]:
        tps = [TopicPartition(self.settings.topic, p) for p in partitions]
        with anyio.fail_after(self.settings.request_timeout):
            got = await read(tps)
        return {tp.partition: int(offset) for tp, offset in got.items()}

    def _check_partition(self, partition: Partition) -> None:
        if not 0 <= partition < self.settings.partitions:
            raise ValueError(f"partition {partition} is outside 0..{self.settings.partitions - 1}")

    def _forget_stored(self, now: float) -> None:
        horizon = now - self.settings.duplicate_window
        stored = self._stored
        while stored and next(iter(stored.values())) < horizon:
            stored.popitem(last=False)

    def _trim_stored(self) -> None:
        while len(self._stored) > self.settings.duplicate_cache:
            self._stored.popitem(last=False)

    def _started(self, thing: T | None) -> T:
        if thing is None:
            raise RuntimeError("KafkaTransport is not entered (use 'async with')")
        return thing


async def _abandon(producer: Any) -> None:
    """Stop a producer that could not flush: cancel its sender, close its connections.

    aiokafka's ``stop()`` first waits for every buffered batch to be delivered or to
    expire; cut short, it leaves the sender task and the connections open (they then
    warn "Unclosed AIOKafkaConnection" when collected). ``_sender`` is private: aiokafka
    is pinned."""
    with anyio.move_on_after(1.0):
        sender = getattr(producer, "_sender", None)
        try:
            if sender is not None:
                await sender.close()
            await producer.client.close()
        except Exception as exc:
            log.debug("abandoning the Kafka producer: %r", exc)


def _log_failure(fut: asyncio.Future[Any]) -> None:
    if not fut.cancelled() and (exc := fut.exception()) is not None:
        log.warning("registration reply not stored: %r", exc)
