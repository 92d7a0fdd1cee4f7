"""``NatsTransport``: the Transport port on NATS JetStream (see the package docstring)."""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Sequence
from typing import ClassVar

import anyio
import nats
import nats.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js import api as js_api
from nats.js.errors import APIError, NotFoundError

from adapters._batched import Batched
from adapters._dead_letter import DeadLetterHook, log_dead_letter
from adapters._lifecycle import Lifecycle
from adapters._nats_connect import close_client, connect, describe
from adapters._nats_durability import check_server_fsync, check_stream
from adapters._nats_settings import NatsSettings
from adapters.nats._codec import encode_packed
from adapters.nats._dead_letter import DeadLetters
from adapters.nats._excusals import ExcusalRecords
from adapters.nats._subjects import Subjects
from adapters.nats._subscription import GroupFlush, NatsSubscription
from adapters.nats._trim import ConsumerFloor, partition_floors
from core.errors import BrokerUnavailableError, PublishError, PublishRefusedError
from core.messages import Envelope, is_valid_project_id
from core.model import Partition
from core.packing import MAX_PACK_BYTES, packed, parts_in
from core.ports import Subscription, TransportFeatures
from core.server_floors import NATS_ATOMIC_BATCH, NATS_KILL_SAFE

__all__ = ["NatsTransport"]

log = logging.getLogger("shoal.adapters.nats")

_STREAM_NAME_IN_USE = 10058  # 'stream name already in use with a different configuration'
_BATCH_DUPLICATE_ID = 10201  # 'atomic publish batch contains duplicate message id'
H_BATCH_ID = "Nats-Batch-Id"
H_BATCH_SEQUENCE = "Nats-Batch-Sequence"
H_BATCH_COMMIT = "Nats-Batch-Commit"


_CONSUMER_PAGE = 256  # JetStream's consumer list page
# Consumers asked for at once from this many up are read by one list of the stream's
# consumers (the leader reads every partition's backlog at once: 128 consumer infos were
# 128 requests); fewer, one request each.
_LIST_FROM = 8
# The first message after a floor, read by backlog (its parts) and asked again by
# oldest_unacked (its time) just after: a stored message does not change and none can be
# stored before it, so one found this recently serves (unless purged meanwhile).
_RECENT = 1.0
# Fewer messages go as plain publishes, all in flight at once: the server opens a file
# store of its own for every atomic batch (measured with pprof: 43 % of nats-server's CPU
# when each project's first request was a batch of two, its announcement and its pack).
_ATOMIC_FROM = 8


def _floor_of(info: js_api.ConsumerInfo) -> ConsumerFloor:
    config = info.config
    filters = config.filter_subjects or ([config.filter_subject] if config.filter_subject else [])
    floor = info.ack_floor.stream_seq if info.ack_floor is not None else 0
    return ConsumerFloor(info.name, frozenset(filters), floor)


class NatsTransport(Lifecycle):
    """The Transport port on NATS JetStream.

    ``async with NatsTransport(settings) as t:`` connects (bounded by ``connect_timeout``),
    creates or updates the work stream and the dead-letter stream, and listens for
    max-deliveries advisories; leaving closes the subscriptions, flushes the connection
    (bounded by ``close_timeout``) and closes it. The connection reconnects forever;
    every server call is bounded by a timeout. ``dead_letter`` is awaited once per dead
    letter (see ``_dead_letter``).
    """

    # pull subscribers of one durable consumer compete; one deployment per datacenter
    # (NatsSettings.for_cluster) is what multi-datacenter routing is built on
    features: ClassVar[TransportFeatures] = TransportFeatures("nats")

    def __init__(
        self,
        settings: NatsSettings | None = None,
        *,
        dead_letter: DeadLetterHook | None = None,
        position: str | None = None,
    ) -> None:
        """``position`` names a position of one's own (a broadcast handler's,
        ``core.modes.position_of``): the durable consumers are ``p{partition}-{position}``
        instead of the group's ``p{partition}``."""
        self.settings = settings or NatsSettings()
        self._position = position
        self.subjects = Subjects(self.settings.subject_prefix, self.settings.dead_letter_prefix)
        self._hook = dead_letter or log_dead_letter
        self._nc: Client | None = None
        self._js: JetStreamContext | None = None
        self._dead: DeadLetters | None = None
        self._excusals: ExcusalRecords | None = None
        self._flusher: GroupFlush | None = None
        self._subscriptions: set[NatsSubscription] = set()
        self._closing = False
        self._batch_slots = anyio.Semaphore(self.settings.max_inflight_batches)
        self._infos: Batched[str, js_api.ConsumerInfo | None] = Batched(self._read_infos)
        # subject -> (when read, the floor it was read after, the first message after it)
        self._recent_firsts: dict[str, tuple[float, int, js_api.RawStreamMsg]] = {}

    # -- lifecycle -------------------------------------------------------------------

    async def _connect(self) -> None:
        s = self.settings
        self._closing = False
        self._nc = await connect(
            s,
            name=s.name,
            needs=(NATS_KILL_SAFE, NATS_ATOMIC_BATCH),
            error_cb=self._on_error,
            allow_reconnect=True,
            max_reconnect_attempts=-1,
            reconnect_time_wait=s.reconnect_wait,
            drain_timeout=max(1, round(s.close_timeout)),
            disconnected_cb=self._on_disconnected,
            reconnected_cb=self._on_reconnected,
        )
        self._js = self._nc.jetstream(timeout=s.request_timeout)
        self._dead = DeadLetters(self._nc, self._js, s, self.subjects, self._hook)
        self._flusher = GroupFlush(self._nc, s.request_timeout)
        await check_server_fsync(
            s.monitors, request_timeout=s.request_timeout, require=s.require_sync_always
        )
        await self._ensure_stream(self._stream_config())
        await self._ensure_stream(self._dead.stream_config())
        self._excusals = ExcusalRecords(self._js, s)
        await self._excusals.ensure()

    async def _disconnect(self) -> None:
        """Stop listening, flush what is buffered (bounded by ``close_timeout``), close.

        Not nats-py's drain(): it waits for every pull subscription's queue to be
        "processed", which never happens, and a drain cut short leaks subscription tasks.
        publish() and settlements are confirmed before they return; a flush is enough.
        """
        nc = self._nc
        self._nc, self._js, self._dead, self._flusher = None, None, None, None
        self._excusals = None
        if nc is None or nc.is_closed:
            return
        self._closing = True
        for sub in list(self._subscriptions):
            await sub.close()
        with anyio.move_on_after(self.settings.close_timeout):
            try:
                if nc.is_connected:
                    await nc.flush(timeout=max(1, round(self.settings.close_timeout)))
            except (nats.errors.Error, TimeoutError) as exc:
                log.debug("NATS flush before close: %r", exc)
        await close_client(nc, 1.0)

    @property
    def connected(self) -> bool:
        """Connected to a server now (False while reconnecting, and before entering)."""
        return self._nc is not None and self._nc.is_connected

    @property
    def dead_letters(self) -> int:
        """How many dead letters this transport has handled since it was entered."""
        return self._dead.count if self._dead else 0

    # -- the port --------------------------------------------------------------------

    async def publish(self, envelopes: Sequence[Envelope]) -> None:
        """Store every envelope, the envelopes sharing a subject as one message (a pack,
        ``core.packing``), as JetStream atomic batches of up to ``atomic_batch_max``
        messages: the server fsyncs a batch once (not once per message) and stores all of
        it or none of it. Return once every batch is confirmed.

        Each message keeps its ``Nats-Msg-Id`` (a pack's is its stable ``pack_id``). A
        retry with the same envelopes (in the same order, as the gateway retries) packs
        them the same way and re-sends batches that may already be stored;
        the server then refuses the whole batch as "contains duplicate message id", and
        since a batch is all or nothing, that refusal means the batch was stored before:
        it counts as confirmed.

        Raises ``ValueError`` before publishing anything when an envelope cannot be encoded,
        and ``PublishError`` naming how many messages were not confirmed within
        ``publish_timeout``.
        """
        if not envelopes:
            return
        self._jetstream()
        if self.settings.refuse_while_disconnected and not self.connected:
            raise PublishError(
                f"0 of {len(envelopes)} messages stored: not connected to {describe(self.settings)}"
            )
        max_bytes = min(MAX_PACK_BYTES, self._client().max_payload // 2)
        packs = packed(envelopes, max_bytes=max_bytes)
        encoded = [encode_packed(pack, self.subjects) for pack in packs]
        size = self.settings.atomic_batch_max
        chunks = [
            (encoded[i : i + size], sum(len(pack) for pack in packs[i : i + size]))
            for i in range(0, len(encoded), size)
        ]
        failed = refused = 0
        errors: list[str] = []

        async def send(chunk: list[tuple[str, dict[str, str], bytes]], count: int) -> None:
            nonlocal failed, refused
            try:
                async with self._batch_slots:
                    await self._publish_batch(chunk)
            except (PublishError, nats.errors.Error, TimeoutError) as exc:
                failed += count
                refused += count if isinstance(exc, PublishRefusedError) else 0
                errors.append(str(exc) or repr(exc))

        with anyio.move_on_after(self.settings.publish_timeout) as scope:
            async with anyio.create_task_group() as tg:
                for chunk, count in chunks:
                    tg.start_soon(send, chunk, count)
        if scope.cancelled_caught:
            failed = len(envelopes)
            errors.append(f"no confirmation within {self.settings.publish_timeout} s")
        if failed:
            # Every batch refused outright (all or nothing each): nothing was stored.
            error = PublishRefusedError if refused == len(envelopes) else PublishError
            raise error(
                f"{failed} of {len(envelopes)} messages not confirmed by stream "
                f"{self.settings.stream}: {errors[0]}"
            )

    async def _publish_batch(self, batch: list[tuple[str, dict[str, str], bytes]]) -> None:
        """One atomic batch: the first message opens it (a request, answered empty), the
        middle ones follow without a reply, the last commits it (answered with a PubAck).
        Fewer than ``_ATOMIC_FROM`` messages are plain publishes in flight at once: then a
        ``PublishRefusedError`` only when every one of them was refused (nothing stored)."""
        nc = self._client()
        timeout = self.settings.request_timeout
        if len(batch) < _ATOMIC_FROM:
            failures: list[Exception] = []

            async def one(subject: str, headers: dict[str, str], payload: bytes) -> None:
                try:
                    reply = await nc.request(subject, payload, timeout, headers=headers)
                    await self._check_ack(reply)
                except (PublishError, nats.errors.Error, TimeoutError) as exc:
                    failures.append(exc)

            async with anyio.create_task_group() as tg:
                for subject, headers, payload in batch:
                    tg.start_soon(one, subject, headers, payload)
            if len(failures) == len(batch) and all(
                isinstance(f, PublishRefusedError) for f in failures
            ):
                raise failures[0]
            if failures:
                raise PublishError(str(failures[0]) or repr(failures[0]))
            return
        batch_id = uuid.uuid4().hex
        last = len(batch)
        for number, (subject, headers, payload) in enumerate(batch, start=1):
            headers[H_BATCH_ID] = batch_id
            headers[H_BATCH_SEQUENCE] = str(number)
            if number == 1:
                reply = await nc.request(subject, payload, timeout, headers=headers)
                if reply.data:  # an empty answer means "batch open"; anything else is an error
                    await self._check_ack(reply)
            elif number < last:
                await nc.publish(subject, payload, headers=headers)
            else:
                headers[H_BATCH_COMMIT] = "1"
                await self._check_ack(await nc.request(subject, payload, timeout, headers=headers))

    @staticmethod
    async def _check_ack(reply: Msg) -> None:
        try:
            answer = json.loads(reply.data)
        except ValueError:
            raise PublishError(
                f"unreadable publish acknowledgement: {reply.data[:200]!r}"
            ) from None
        error = answer.get("error") if isinstance(answer, dict) else None
        if error is None:
            return
        if error.get("err_code") == _BATCH_DUPLICATE_ID:
            log.debug("batch already stored (duplicate message id): counted as confirmed")
            return
        raise PublishRefusedError(
            f"stream refused the batch: {error.get('description')} "
            f"(err_code {error.get('err_code')})"
        )

    async def open(self, partition: Partition, consumer_id: str) -> Subscription:
        """Create (or update) the partition's durable consumer ``p{partition}`` (or
        ``p{partition}-{position}``) and bind a pull subscription to it. Several
        subscriptions to one durable consumer compete: each message goes to one of them.
        ``consumer_id`` names the caller in logs only. Raises
        ``BrokerUnavailableError`` when JetStream refuses or does not answer."""
        try:
            return await self._open(partition, consumer_id)
        except (nats.errors.Error, TimeoutError) as exc:
            raise BrokerUnavailableError(f"NATS: opening partition {partition}: {exc!r}") from exc

    async def _open(self, partition: Partition, consumer_id: str) -> Subscription:
        js = self._jetstream()
        s = self.settings
        name = self._consumer_name(partition)
        config = js_api.ConsumerConfig(
            name=name,
            durable_name=name,
            description=f"shoal partition {partition}",
            filter_subjects=self.subjects.consumer_filters(partition),
            deliver_policy=js_api.DeliverPolicy.ALL,
            ack_policy=js_api.AckPolicy.EXPLICIT,
            ack_wait=s.ack_wait,
            max_deliver=-1,  # unbounded: the consumer applies the retry budget (core.retry)
            max_ack_pending=s.max_ack_pending,
        )
        consumer = await js.add_consumer(s.stream, config, timeout=s.request_timeout)
        stream = await js.stream_info(s.stream)
        created = stream.created.isoformat() if stream.created is not None else "unknown"
        log_id = self._log_id(created)
        assert self._excusals is not None
        with anyio.fail_after(s.request_timeout):
            excusals = await self._excusals.read(name, log_id)
        psub = await js.pull_subscribe_bind(consumer=name, stream=s.stream)
        assert self._nc is not None and self._dead is not None and self._flusher is not None
        log.debug("partition %d opened by %s", partition, consumer_id)
        sub = NatsSubscription(
            partition,
            consumer_id,
            psub=psub,
            nc=self._nc,
            subjects=self.subjects,
            dead=self._dead,
            stream=s.stream,
            log_id=log_id,
            excusals=excusals,
            records=self._excusals,
            delivered_before=consumer.delivered.stream_seq if consumer.delivered else 0,
            request_timeout=s.request_timeout,
            ack_wait=s.ack_wait,
            flusher=self._flusher,
            on_close=self._subscriptions.discard,
        )
        self._subscriptions.add(sub)
        return sub

    def _log_id(self, created: str) -> str:
        """The stream and its creation time; with the cluster's name in front when set, so
        two datacenters' streams (same name, maybe created in the same instant) never
        share a log: their positions are unrelated."""
        s = self.settings
        where = f"{s.cluster}/" if s.cluster else ""
        return f"nats:{where}{s.stream}@{created}"

    async def drain_mark(self, partition: Partition) -> int:
        """A position at or above every message of ``partition`` stored so far (the
        stream's last sequence), for ``drained``. Multi-datacenter migration only; the Kafka
        transport has the same shape (end offset) but it is not built yet."""
        try:
            info = await self._jetstream().stream_info(self.settings.stream)
        except (nats.errors.Error, TimeoutError) as exc:
            raise BrokerUnavailableError(f"NATS: stream info: {exc!r}") from exc
        return info.state.last_seq

    async def drained(self, partition: Partition, mark: int) -> tuple[bool, int]:
        """Whether every message of ``partition`` at or below ``mark`` is acked (its
        consumer's ack floor reached the mark, or nothing is pending or unacked at all),
        and how many of its messages are pending or unacked now."""
        try:
            info = await self._consumer_info(self.subjects.consumer_name(partition))
        except (nats.errors.Error, TimeoutError) as exc:
            raise BrokerUnavailableError(f"NATS: consumer of {partition}: {exc!r}") from exc
        if info is None:  # never consumed: drained only if nothing was stored
            stored = await self.backlog(partition)
            return stored == 0, stored
        waiting = (info.num_pending or 0) + (info.num_ack_pending or 0)
        floor = info.ack_floor.stream_seq if info.ack_floor is not None else 0
        return (floor >= mark or waiting == 0), waiting

    async def backlog(self, partition: Partition) -> int:
        """The consumer's pending plus unacked messages; before the consumer exists, the
        stream's message count on the partition's subjects. Raises
        ``BrokerUnavailableError`` when JetStream does not answer."""
        try:
            return await self._backlog(partition)
        except (nats.errors.Error, TimeoutError) as exc:
            raise BrokerUnavailableError(
                f"NATS: backlog of partition {partition}: {exc!r}"
            ) from exc

    async def _backlog(self, partition: Partition) -> int:
        """Stored messages times the parts of the oldest one not acked: the server counts
        a pack once, and the lag rule wants messages (a partition's packs come from
        requests of similar size, so the oldest stands for the rest)."""
        js = self._jetstream()
        s = self.settings
        floor = 0
        info = await self._consumer_info(self._consumer_name(partition))
        if info is None:
            stored = 0
            for subject in self.subjects.consumer_filters(partition):
                si = await js.stream_info(s.stream, subjects_filter=subject)
                stored += sum((si.state.subjects or {}).values())
        else:
            stored = (info.num_pending or 0) + (info.num_ack_pending or 0)
            floor = (info.ack_floor.stream_seq or 0) if info.ack_floor is not None else 0
        if not stored:
            return 0
        oldest = await self._first_after(self.subjects.consumer_filters(partition)[-1], floor)
        return stored if oldest is None else stored * parts_in(oldest.data or b"")

    async def oldest_unacked(self, partition: Partition) -> float | None:
        """The stored time of the first message on the partition's subjects after the
        durable consumer's ack floor (from the stream's start before the consumer exists);
        None when the backlog is empty. Raises ``BrokerUnavailableError`` when JetStream
        does not answer."""
        try:
            return await self._oldest_unacked(partition)
        except (nats.errors.Error, TimeoutError) as exc:
            raise BrokerUnavailableError(
                f"NATS: oldest unacked message of partition {partition}: {exc!r}"
            ) from exc

    async def _oldest_unacked(self, partition: Partition) -> float | None:
        floor = 0
        info = await self._consumer_info(self.subjects.consumer_name(partition))
        if info is not None:
            if not (info.num_pending or 0) + (info.num_ack_pending or 0):
                return None
            if info.ack_floor is not None:
                floor = info.ack_floor.stream_seq or 0
        # Acks can land out of order: a message above the floor may be acked already, but
        # the first one after it is not (that is what the floor means).
        oldest: tuple[int, float] | None = None
        for subject in self.subjects.consumer_filters(partition):
            msg = await self._first_after(subject, floor, _RECENT)
            if msg is None:
                continue
            if msg.seq is not None and msg.time is not None:
                found = (msg.seq, msg.time.timestamp())
                oldest = found if oldest is None or found < oldest else oldest
        return None if oldest is None else oldest[1]

    async def trim_landed(self, partitions: int) -> int:
        """Once the stream holds ``trim_at`` of its ``max_bytes``, drop each partition's
        messages that every consumer reading it has acked (``_trim``); the messages
        dropped. Nothing with workqueue retention (an ack deletes) or without a cap.
        Raises ``BrokerUnavailableError`` when JetStream does not answer."""
        s = self.settings
        if s.retention != "limits" or s.max_bytes is None:
            return 0
        try:
            return await self._trim_landed(partitions)
        except (nats.errors.Error, TimeoutError) as exc:
            raise BrokerUnavailableError(f"NATS: trimming landed messages: {exc!r}") from exc

    async def _trim_landed(self, partitions: int) -> int:
        js = self._jetstream()
        s = self.settings
        info = await js.stream_info(s.stream)
        cap, before = info.config.max_bytes or 0, info.state
        if cap <= 0 or before.bytes < s.trim_at * cap:  # the cap the stream has now
            return 0
        floors = partition_floors(
            [_floor_of(c) for c in await self._consumers()],
            partitions,
            self.subjects.consumer_filters,
        )
        dropped = 0
        for partition, (floor, _) in floors.items():
            if floor > 0:
                for subject in self.subjects.consumer_filters(partition):
                    dropped += await self._purge_below(subject, floor + 1)
        after = (await js.stream_info(s.stream)).state
        if after.bytes >= s.trim_at * cap:
            lowest = sorted(floors.values())  # the consumers furthest behind hold it
            held = list(dict.fromkeys(name for _, name in lowest))
            log.warning(
                "stream %s holds %d of its %d bytes after dropping %d landed messages: "
                "unlanded messages (a stopped handler, a consumer left behind: %s) fill it",
                s.stream,
                after.bytes,
                cap,
                dropped,
                ", ".join(held[:5]),
            )
        return dropped

    async def _purge_below(self, subject: str, sequence: int) -> int:
        """Purge ``subject``'s messages below stream ``sequence``; how many went (the API's
        answer: nats-py's ``purge_stream`` keeps only whether it succeeded)."""
        request = json.dumps({"filter": subject, "seq": sequence}).encode()
        reply = await self._client().request(
            f"$JS.API.STREAM.PURGE.{self.settings.stream}",
            request,
            timeout=self.settings.request_timeout,
        )
        answer = json.loads(reply.data or b"{}")
        if "error" in answer:
            APIError.from_error(answer["error"])  # raises the error's own type
        return int(answer.get("purged", 0))

    async def _consumer_info(self, name: str) -> js_api.ConsumerInfo | None:
        """The consumer's info (None: it does not exist), read with the other consumers
        asked for at the same time (``_read_infos``)."""
        return await self._infos.get(name)

    async def _read_infos(self, names: Sequence[str]) -> dict[str, js_api.ConsumerInfo | None]:
        js = self._jetstream()
        s = self.settings
        found: dict[str, js_api.ConsumerInfo | None] = {}
        if len(names) >= _LIST_FROM:
            listed = {info.name: info for info in await self._consumers()}
            found = {name: listed[name] for name in names if name in listed}

        async def one(name: str) -> None:
            try:
                found[name] = await js.consumer_info(s.stream, name, timeout=s.request_timeout)
            except NotFoundError:
                found[name] = None

        async with anyio.create_task_group() as tg:
            for name in names:
                if name not in found:  # not listed: it does not exist, or is newer than the list
                    tg.start_soon(one, name)
        return found

    async def _first_after(
        self, subject: str, floor: int, recent: float = 0.0
    ) -> js_api.RawStreamMsg | None:
        """The first stored message on ``subject`` after sequence ``floor`` (None: none);
        the same question answered at most ``recent`` seconds ago serves as it is."""
        if recent and (hit := self._recent_firsts.get(subject)) is not None:
            at, asked_floor, msg = hit
            if asked_floor == floor and anyio.current_time() - at <= recent:
                return msg
        js, stream = self._jetstream(), self.settings.stream
        try:
            msg = await js.get_msg(stream, seq=floor + 1, subject=subject, next=True)
        except NotFoundError:
            return None  # not kept: a message stored next is the answer then
        self._recent_firsts[subject] = (anyio.current_time(), floor, msg)
        return msg

    async def _consumers(self) -> list[js_api.ConsumerInfo]:
        js = self._jetstream()
        found: list[js_api.ConsumerInfo] = []
        while True:
            page = await js.consumers_info(self.settings.stream, offset=len(found) or None)
            found.extend(page)
            if len(page) < _CONSUMER_PAGE:
                return found

    async def reply_registration(self, partition: Partition, project_id: str, by: str) -> None:
        """Core NATS publish of ``{"project", "partition", "handler"}`` to the project's
        reg.response subject: not stored, lost when nobody listens (best effort)."""
        if not is_valid_project_id(project_id):
            raise ValueError(f"project_id {project_id!r} is not one safe subject token")
        nc = self._client()
        body = json.dumps({"project": project_id, "partition": partition, "handler": by})
        await nc.publish(self.subjects.reg_response(partition, project_id), body.encode())

    # -- helpers ---------------------------------------------------------------------

    def _consumer_name(self, partition: Partition) -> str:
        name = self.subjects.consumer_name(partition)
        return name if self._position is None else f"{name}-{self._position}"

    def _stream_config(self) -> js_api.StreamConfig:
        s = self.settings
        limits = s.retention == "limits"
        config = js_api.StreamConfig(
            name=s.stream,
            subjects=self.subjects.stream_subjects(),
            retention=js_api.RetentionPolicy.LIMITS
            if limits
            else js_api.RetentionPolicy.WORK_QUEUE,
            max_age=s.max_age if limits else None,
            max_bytes=s.max_bytes,
            discard=js_api.DiscardPolicy.NEW,  # full: refuse new messages, drop none
            storage=js_api.StorageType(s.storage),
            num_replicas=s.replicas,
            duplicate_window=s.duplicate_window,
            allow_atomic=True,
        )
        return config

    async def _ensure_stream(self, config: js_api.StreamConfig) -> None:
        """Create the stream, or update it when it exists with another configuration; then
        check that it has the storage and replicas asked for (``_durability``)."""
        js = self._jetstream()
        try:
            info = await js.add_stream(config)
        except APIError as exc:
            if exc.err_code != _STREAM_NAME_IN_USE:
                raise
            info = await js.update_stream(config)
        check_stream(info, config)

    def _client(self) -> Client:
        if self._nc is None:
            raise RuntimeError("NatsTransport is not entered (use 'async with')")
        return self._nc

    def _jetstream(self) -> JetStreamContext:
        if self._js is None:
            raise RuntimeError("NatsTransport is not entered (use 'async with')")
        return self._js

    async def _on_error(self, exc: Exception) -> None:
        nc = self._nc
        if self._closing or (nc is not None and nc.is_reconnecting):
            log.debug("NATS: %r", exc)  # one warning per outage is enough (disconnected)
        else:
            log.warning("NATS: %r", exc)

    async def _on_disconnected(self) -> None:
        if self._closing:
            return
        log.warning("NATS disconnected from %s", describe(self.settings))

    async def _on_reconnected(self) -> None:
        log.info("NATS reconnected")
