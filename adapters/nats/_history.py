"""``NatsHistory``: the History port on the work stream (limits retention keeps consumed
messages until ``max_age`` / ``max_bytes``).

A read creates an ephemeral pull consumer of its own (``replay-{random}``, no acks, held
in memory, removed at the end or by the server once idle): it filters on the partition's
subjects (or the project's data subject and the partition's announcements) and starts
where the window does (``by_start_sequence``). A time is first turned into the sequence of
the first message stored at or after it (the stream's message-get API with
``start_time``, a millisecond early: the window is checked here on the timestamps the
messages carry, so the seek only has to land at or before the first one). Not
``by_start_time``: with several filter subjects nats-server 2.15 started such a consumer
past the first messages of the window (seen in the contract suite).
The end is the window's end, or the stream's last sequence when the read began, so a read
ends while publishing goes on. The durable consumers of the handlers are not touched.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import anyio
import nats
import nats.errors
from nats.aio.msg import Msg
from nats.js import api as js_api
from nats.js.errors import NotFoundError

from adapters.nats._codec import decode_all
from adapters.nats._tool_client import NatsToolClient
from core.errors import BrokerUnavailableError
from core.model import Partition
from core.replay import AtPosition, Bound, NotReplayableError, Place, StoredMessage, Window

__all__ = ["NatsHistory"]


_BATCH = 512
_SEEK_EARLY = 0.001  # seconds: a stored time read back as a float may round up
_NO_MESSAGE_FOUND = 10037


class NatsHistory(NatsToolClient):
    """The History port on NATS JetStream's work stream."""

    client_suffix = "replay"

    # -- the port --------------------------------------------------------------------

    async def read(
        self, partition: Partition, window: Window, project_id: str | None = None
    ) -> AsyncIterator[StoredMessage]:
        if partition < 0:
            raise ValueError(f"partition {partition} is negative")
        js = self._jetstream()
        s = self.settings
        try:
            info = await js.stream_info(s.stream)
        except NotFoundError:
            return  # nothing was ever published
        except (nats.errors.Error, TimeoutError) as exc:
            raise BrokerUnavailableError(f"NATS: reading stream {s.stream}: {exc!r}") from exc
        if info.config.retention == js_api.RetentionPolicy.WORK_QUEUE:
            raise NotReplayableError(
                f"stream {s.stream} has work-queue retention: an acked message is deleted, "
                "so there is no history to replay. Keep history with limits retention: "
                "SHOAL_NATS_RETENTION=limits (with SHOAL_NATS_MAX_AGE / SHOAL_NATS_MAX_BYTES "
                "to bound it); a work-queue stream cannot be switched in place, so delete it "
                "(or use another SHOAL_NATS_STREAM) before starting with limits"
            )
        last = info.state.last_seq or 0
        try:
            first = await self._first_sequence(window.start)
            if first is None or first > last:
                return
            consumer = await js.add_consumer(
                s.stream, self._consumer_config(partition, first, project_id)
            )
        except (nats.errors.Error, TimeoutError) as exc:
            raise BrokerUnavailableError(f"NATS: starting a replay on {s.stream}: {exc!r}") from exc
        try:
            async for message in self._messages(consumer, last, window, project_id):
                yield message
        finally:
            with (
                anyio.CancelScope(shield=True),
                anyio.move_on_after(s.close_timeout),
                contextlib.suppress(nats.errors.Error, TimeoutError),
            ):
                await js.delete_consumer(s.stream, consumer.name)

    # -- helpers ---------------------------------------------------------------------

    async def _first_sequence(self, start: Bound) -> int | None:
        """The stream sequence to start at; None when no message is stored at or after a
        time bound."""
        if isinstance(start, AtPosition):
            return max(start.position, 1)
        s = self.settings
        moment = datetime.fromtimestamp(max(start.epoch - _SEEK_EARLY, 0.0), UTC)
        request = {"start_time": moment.isoformat().replace("+00:00", "Z")}
        reply = await self._client().request(
            f"$JS.API.STREAM.MSG.GET.{s.stream}",
            json.dumps(request).encode(),
            timeout=s.request_timeout,
        )
        answer = json.loads(reply.data)
        error = answer.get("error")
        if error is None:
            return int(answer["message"]["seq"])
        if error.get("err_code") == _NO_MESSAGE_FOUND:
            return None
        raise BrokerUnavailableError(
            f"NATS: finding the first message at {moment.isoformat()}: "
            f"{error.get('description')} (err_code {error.get('err_code')})"
        )

    def _consumer_config(
        self, partition: Partition, first: int, project_id: str | None
    ) -> js_api.ConsumerConfig:
        s = self.settings
        data = (
            self.subjects.data(partition, project_id)
            if project_id is not None
            else f"{s.subject_prefix}.p{partition}.*.data"
        )
        return js_api.ConsumerConfig(
            name=f"replay-{uuid.uuid4().hex}",
            description=f"shoal replay of partition {partition}",
            filter_subjects=[self.subjects.announce(partition), data],
            deliver_policy=js_api.DeliverPolicy.BY_START_SEQUENCE,
            opt_start_seq=first,
            ack_policy=js_api.AckPolicy.NONE,
            mem_storage=True,
            inactive_threshold=max(30.0, 6 * s.request_timeout),
        )

    async def _messages(
        self,
        consumer: js_api.ConsumerInfo,
        last: int,
        window: Window,
        project_id: str | None,
    ) -> AsyncIterator[StoredMessage]:
        js = self._jetstream()
        s = self.settings
        pending = consumer.num_pending or 0
        psub = await js.pull_subscribe_bind(consumer=consumer.name, stream=s.stream)
        try:
            while pending > 0:
                try:
                    batch = await psub.fetch(batch=min(pending, _BATCH), timeout=s.request_timeout)
                except TimeoutError:
                    # Aged out since the count was taken, or the server is gone.
                    pending = await self._pending(consumer.name)
                    continue
                for msg in batch:
                    meta = msg.metadata
                    pending = meta.num_pending
                    if meta.sequence.stream > last:
                        return
                    stored_at = meta.timestamp.timestamp()
                    place = window.place(meta.sequence.stream, stored_at)
                    if place is Place.AFTER:
                        return
                    if place is Place.BEFORE:
                        continue
                    for stored in self._stored(msg, meta.sequence.stream, stored_at):
                        if project_id in (None, stored.envelope.project_id):
                            yield stored
        except nats.errors.Error as exc:
            raise BrokerUnavailableError(f"NATS: replay read failed: {exc!r}") from exc
        finally:
            with anyio.CancelScope(shield=True), contextlib.suppress(nats.errors.Error):
                await psub.unsubscribe()

    async def _pending(self, consumer: str) -> int:
        s = self.settings
        try:
            info = await self._jetstream().consumer_info(
                s.stream, consumer, timeout=s.request_timeout
            )
        except (nats.errors.Error, TimeoutError) as exc:
            raise BrokerUnavailableError(f"NATS: replay consumer lost: {exc!r}") from exc
        if info.num_pending:
            raise BrokerUnavailableError(
                f"NATS: {info.num_pending} messages pending but none delivered within "
                f"{s.request_timeout} s"
            )
        return 0

    def _stored(self, msg: Msg, sequence: int, stored_at: float) -> list[StoredMessage]:
        """The messages stored as ``msg``: a pack's parts share its sequence."""
        envelopes = decode_all(
            msg.subject,
            msg.headers,
            msg.data,
            self.subjects.parse(msg.subject),
            fallback_id=f"{self.settings.stream}:{sequence}",
            fallback_time=stored_at,
        )
        return [StoredMessage(envelope, sequence, stored_at) for envelope in envelopes]
