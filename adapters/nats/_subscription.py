"""``NatsSubscription`` and ``NatsDelivery``: one durable pull consumer per partition.

A delivery's ``attempt`` is the server's ``num_delivered`` less the deliveries that
subscriptions closed on purpose gave back (``core.retry.Excusals``, kept in
``_excusals``). A closing subscription excuses the positions from the lowest it fetched
(or, when it fetched nothing lower, the first the consumer delivered after it opened) to
the highest the consumer has delivered by then: that also covers what the server sent to
it that no fetch returned.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import anyio
import nats.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from adapters.nats._codec import decode_all
from adapters.nats._dead_letter import DeadLetters
from adapters.nats._excusals import ExcusalRecords
from adapters.nats._subjects import Subjects
from core.errors import BrokerUnavailableError, PositionGoneError
from core.messages import Envelope
from core.model import Partition
from core.ports import Delivery
from core.retry import DeadLetterReason, Excusals

__all__ = ["GroupFlush", "NatsDelivery", "NatsSubscription"]

log = logging.getLogger("shoal.adapters.nats")

_ACK = b"+ACK"
_NAK = b"-NAK"
_TERM = b"+TERM"
_IN_PROGRESS = b"+WPI"
_UNCONFIRMED = (
    nats.errors.ConnectionClosedError,
    nats.errors.ConnectionReconnectingError,
    nats.errors.NoRespondersError,
    nats.errors.OutboundBufferLimitError,
)  # nats.errors.TimeoutError is already a TimeoutError


@dataclass(frozen=True, slots=True)
class _Settler:
    """What settling needs, shared by every delivery of a subscription."""

    nc: Client
    dead: DeadLetters
    timeout: float


class _Stored:
    """One stored message as fetched: its ack subject, position and attempt (shared by
    the parts of a pack), and how many of its deliveries are not settled yet: the server
    hears of the message once the last one is."""

    __slots__ = ("attempt", "parts", "position", "reply", "settler", "unsettled")

    def __init__(
        self, reply: str, parts: int, *, position: int, attempt: int, settler: _Settler
    ) -> None:
        self.reply = reply
        self.parts = parts
        self.unsettled = parts
        self.position = position
        self.attempt = attempt
        self.settler = settler


class NatsDelivery:
    """One fetched message (or one part of a fetched pack), settled by the subscription's
    bulk ``ack`` or by ``dead_letter`` (a request to the message's ack subject, answered
    once the server processed it, bounded by ``request_timeout``), a pack once its last
    part is. The first settlement that succeeds wins; later ones are no-ops.

    A settlement the server did not confirm raises ``BrokerUnavailableError``: after
    ``request_timeout``, or at once while the connection is down (the settlement is then
    still queued and sent on reconnect). It may or may not have taken effect; the
    delivery stays unsettled, so it may be retried (the server answers a repeated or late
    ack too). Unsettled messages come back after ack_wait: at-least-once, never lost.
    """

    # Only the ack subject of the message is kept, not the message (its headers and
    # subject): a handler holds tens of thousands of deliveries while a file fills, so a
    # delivery is three slots and what it shares with its pack lives in ``_Stored``.
    __slots__ = ("_envelope", "_settled", "_stored")

    def __init__(self, stored: _Stored, envelope: Envelope) -> None:
        self._stored = stored
        self._envelope = envelope
        self._settled = False

    @property
    def envelope(self) -> Envelope:
        return self._envelope

    @property
    def attempt(self) -> int:
        return self._stored.attempt

    @property
    def position(self) -> int:
        """The stream sequence."""
        return self._stored.position

    async def dead_letter(self, reason: DeadLetterReason) -> None:
        """Copy the message to the dead-letter stream, then run the hook; the stored
        message is terminated (a pack acked) once this was its last unsettled part."""
        if self._settled:
            return
        self._settle()
        stored = self._stored
        dead = stored.settler.dead
        try:
            await dead.store(self._envelope, reason, stored.attempt, stored.position)
            if not stored.unsettled:
                await self._request(_TERM if stored.parts == 1 else _ACK)
        except BaseException:
            self.unclaim()
            raise
        await dead.notify(self._envelope, reason, stored.attempt)

    def claim_ack(self) -> bool:
        """Mark settled for a bulk ack; False when this delivery was settled already (the
        first settlement wins). The stored message is acked once ``ack_subject`` says so."""
        if self._settled or not self._stored.reply:
            return False
        self._settle()
        return True

    def _settle(self) -> None:
        self._settled = True
        self._stored.unsettled -= 1

    def unclaim(self) -> None:
        """A settlement that was not confirmed: the delivery may be settled again."""
        if self._settled:
            self._settled = False
            self._stored.unsettled += 1

    @property
    def ack_subject(self) -> str | None:
        """The subject to ack the stored message on once every part of it is settled."""
        return None if self._stored.unsettled else self._stored.reply or None

    @property
    def stored(self) -> _Stored:
        return self._stored

    @property
    def reply(self) -> str | None:
        """The ack subject while unsettled (for in-progress acks), else None."""
        return None if self._settled else self._stored.reply or None

    async def _request(self, payload: bytes) -> None:
        reply = self._stored.reply
        if not reply:
            raise ValueError("not a JetStream message: no ack subject")
        nc, timeout = self._stored.settler.nc, self._stored.settler.timeout
        if not nc.is_connected:
            with contextlib.suppress(nats.errors.Error):
                await nc.publish(reply, payload)  # buffered until the reconnect
            raise BrokerUnavailableError("settlement not confirmed: the NATS connection is down")
        try:
            await nc.request(reply, payload, timeout=timeout)
        except _UNCONFIRMED as exc:
            raise BrokerUnavailableError(f"settlement not confirmed: {exc!r}") from exc


class GroupFlush:
    """One PING/PONG round trip shared by every caller that asked for it before it
    started: a handler acking 128 partitions at once flushes the connection once or
    twice, not 128 times (concurrent flushes also trip a nats-py race on the PONG)."""

    def __init__(self, nc: Client, timeout: float) -> None:
        self._nc = nc
        self._timeout = max(1, round(timeout))
        self._lock = anyio.Lock()
        self._requested = 0
        self._confirmed = 0

    async def flush(self) -> None:
        """Return once the server has processed everything published before this call."""
        self._requested += 1
        wanted = self._requested
        async with self._lock:
            if self._confirmed >= wanted:
                return  # a flush that started after our publishes has come back
            covers = self._requested
            # Shielded (it is bounded by its own timeout): nats-py answers a PONG whose
            # waiter was cancelled with InvalidStateError, which drops the connection.
            with anyio.CancelScope(shield=True):
                await self._nc.flush(timeout=self._timeout)
            self._confirmed = max(self._confirmed, covers)


class _JetStreamUnavailable(Exception):
    """A pull answered by a status that ends it and is not a timeout: no responders
    (JetStream down), or a conflict (the consumer deleted, a leader change)."""


PULL_EXPIRES = 5.0  # how long an idle subscription's pull request stands on the server
_PROBE_EXPIRES = 1.0  # our bound on a no-wait request's answer (the server's is immediate)


class _StandingPull:
    """The pull requests of one pull subscription, sent by hand on nats-py's inbox.

    One request at a time: a no-wait request for the batch takes what is stored now; once
    one came back empty, a request for the next message stands on the server for
    ``PULL_EXPIRES``, so an idle partition costs two requests per ``PULL_EXPIRES``, and a
    busy one a no-wait request per fetch. Standing requests ask for one message so that
    competing subscriptions (the shared mode) do not split a burst message by message:
    the server rotates its waiting requests after each message it hands out, and requests
    of many would take every other message for as long as they stand. A request ends
    once served, at its status (404 nothing stored, 408 expired; others are errors), at
    its time, or with the connection (a reconnect since it was sent).

    Messages are taken from the inbox's queue one by one, so a wait cancelled at any point
    leaves every message that arrived in the queue."""

    def __init__(self, psub: JetStreamContext.PullSubscription, nc: Client) -> None:
        self._nc = nc
        self._next_subject: str = psub._nms  # nats-py keeps no public one
        self._inbox: str = psub._deliver
        self._sub = psub._sub
        self._owed = 0  # messages the open request may still deliver
        self._got = 0  # messages it delivered
        self._standing = False  # it waits on the server (else a no-wait request)
        self._stand_next = False  # the last no-wait request found nothing
        self._until = 0.0  # monotonic time past which it is no longer open
        self._reconnects = 0  # the connection's reconnect count when it was sent

    def _open(self) -> bool:
        return (
            self._owed > 0
            and time.monotonic() < self._until
            and self._nc.stats["reconnects"] == self._reconnects
        )

    async def ensure(self, batch: int) -> None:
        """Send a request unless one is open."""
        if self._open():
            return
        self._standing = self._stand_next
        if self._standing:
            request: dict[str, object] = {"batch": 1, "expires": int(PULL_EXPIRES * 1e9)}
            # our clock's view of its end, a little past the server's (its 408 says it first)
            self._owed, expires = 1, PULL_EXPIRES + 1.0
        else:
            request = {"batch": batch, "no_wait": True}
            self._owed, expires = batch, _PROBE_EXPIRES
        self._got = 0
        await self._nc.publish(self._next_subject, json.dumps(request).encode(), self._inbox)
        self._until = time.monotonic() + expires
        self._reconnects = self._nc.stats["reconnects"]

    def ready(self, most: int) -> list[Msg]:
        """The messages waiting in the inbox, at most ``most``, without waiting."""
        queue = self._sub._pending_queue
        msgs: list[Msg] = []
        while len(msgs) < most and not queue.empty():
            if (msg := self._taken(queue.get_nowait())) is not None:
                msgs.append(msg)
        return msgs

    async def wait(self, most: int) -> list[Msg]:
        """Wait for the first message, then take what else is waiting (at most ``most``);
        [] once the open request ended without one."""
        queue = self._sub._pending_queue
        while self._open():
            # asyncio.Queue.get removes an item only once it returns: cancel-safe
            if (msg := self._taken(await queue.get())) is not None:
                return [msg, *self.ready(most - 1)]
        return []

    def _taken(self, msg: Msg) -> Msg | None:
        """``msg`` taken off the queue: itself if a message, None for a status (which ends
        the open request)."""
        self._sub._pending_size -= len(msg.data)  # as nats-py's next_msg does
        self._sub._pending_queue.task_done()
        status = msg.headers.get("Status") if msg.headers else None
        if status is None:
            self._owed -= 1
            self._got += 1
            self._stand_next = False
            return msg
        if status == "100":  # a heartbeat or flow control: the request stays open
            return None
        self._owed = 0
        self._stand_next = not self._standing and not self._got
        if status in ("404", "408"):  # nothing stored, or it expired: nothing is wrong
            return None
        raise _JetStreamUnavailable(
            f"status {status} {msg.headers.get('Description', '') if msg.headers else ''}"
        )


class NatsSubscription:
    """A pull subscription bound to the partition's durable consumer."""

    def __init__(
        self,
        partition: Partition,
        consumer_id: str,
        *,
        psub: JetStreamContext.PullSubscription,
        nc: Client,
        subjects: Subjects,
        dead: DeadLetters,
        stream: str,
        log_id: str,
        excusals: Excusals,
        records: ExcusalRecords,
        delivered_before: int,
        request_timeout: float,
        ack_wait: float,
        flusher: GroupFlush,
        on_close: Callable[[NatsSubscription], None],
    ) -> None:
        self.partition = partition
        self.ack_wait = ack_wait
        self.consumer_id = consumer_id
        self.log_id = log_id  # the stream's name and creation time
        self._psub = psub
        self._nc = nc
        self._subjects = subjects
        self._settler = _Settler(nc, dead, request_timeout)
        self._stream = stream
        self._timeout = request_timeout
        self._on_close = on_close
        self._flusher = flusher
        self._excusals = excusals  # as the consumer's last close left them
        self._records = records
        # The stream sequences this subscription is answerable for start at the lowest it
        # fetched, or past the consumer's highest delivered when it opened.
        self._lowest = delivered_before + 1
        self._closed = False
        self._surplus: collections.deque[NatsDelivery] = collections.deque()
        self._parts_per_message = 1.0  # of the last pull: how many stored messages to ask for
        self._pulls = _StandingPull(psub, nc)

    async def fetch(self, max_messages: int, timeout: float) -> Sequence[Delivery]:  # noqa: ASYNC109
        """Up to ``max_messages`` deliveries, [] when none came within ``timeout`` (also
        while the connection is down or JetStream is unavailable). Raises
        ``anyio.ClosedResourceError`` after close().

        A stored message may be a pack of many deliveries: the pull asks for about as
        many stored messages as the recent ones' parts make ``max_messages``, and the
        parts past it wait here for the next fetch (they were fetched, so their ack wait
        runs: the next fetch takes them first, without a pull)."""
        if self._closed:
            raise anyio.ClosedResourceError
        if max_messages < 1:
            raise ValueError("max_messages must be at least 1")
        if not self._surplus:
            self._surplus.extend(await self._pull(max_messages, timeout))
        return [self._surplus.popleft() for _ in range(min(max_messages, len(self._surplus)))]

    async def _pull(self, max_messages: int, timeout: float) -> list[NatsDelivery]:  # noqa: ASYNC109
        """What arrived for this subscription within ``timeout``, at most the batch one pull
        asks for (``_StandingPull``): an idle partition's request stands on the server for
        ``PULL_EXPIRES`` whatever ``timeout`` is, so it costs the server and this process
        one request per ``PULL_EXPIRES``, not two per fetch (nats-py's ``fetch`` sends a
        no-wait probe and then a waiting request, each ``timeout``); a fetch cancelled or
        timed out loses nothing: what comes later waits in the queue for the next fetch,
        or is nak'd by ``close``."""
        timeout = max(timeout, 0.01)
        batch = max(1, min(max_messages, math.ceil(max_messages / self._parts_per_message)))
        msgs = self._pulls.ready(batch)
        if not msgs:
            try:
                with anyio.move_on_after(timeout):
                    while not msgs:  # a no-wait request that found nothing: then one stands
                        await self._pulls.ensure(batch)
                        msgs = await self._pulls.wait(batch)
            except (
                _JetStreamUnavailable,
                nats.errors.ConnectionReconnectingError,
                nats.errors.OutboundBufferLimitError,
            ) as exc:
                # JetStream not ready (a restart, a leader election), or the consumer is
                # gone with its stream: nothing arrived; wait out the timeout so that a
                # caller's loop does not spin.
                log.warning("fetch on partition %d: JetStream unavailable: %s", self.partition, exc)
                await self._check_consumer()
                await anyio.sleep(timeout)
                return []
        deliveries = [d for m in msgs for d in self._deliveries(m)]
        if msgs:
            self._parts_per_message = len(deliveries) / len(msgs)
        return deliveries

    async def _check_consumer(self) -> None:
        """``PositionGoneError`` when the server says the consumer does not exist (its
        stream was deleted, maybe re-created): this subscription can never fetch again."""
        try:
            with anyio.fail_after(self._timeout):
                await self._psub.consumer_info()
        except NotFoundError as exc:
            raise PositionGoneError(
                f"NATS: the consumer of partition {self.partition} on stream {self._stream} "
                "is gone (the stream was deleted or re-created)"
            ) from exc
        except (nats.errors.Error, TimeoutError):
            pass  # JetStream itself is unavailable: fetching again is right

    async def ack(self, deliveries: Sequence[Delivery]) -> None:
        """Publish every ack without waiting for its answer, then one PING/PONG round trip
        (``flush``): the server has them all once it returns. Per-message confirmed acks
        cost a round trip each; a lost one only means a redelivery, never a loss.
        ``TimeoutError`` when the connection did not confirm (those deliveries stay
        unsettled and may be acked again)."""
        claimed: list[NatsDelivery] = []
        try:
            for delivery in deliveries:
                if not isinstance(delivery, NatsDelivery):
                    raise TypeError(f"not a delivery of this subscription: {delivery!r}")
                if delivery.claim_ack():
                    claimed.append(delivery)
            # A pack's parts may all be in this call: its one ack goes out once.
            subjects = {s for d in claimed if (s := d.ack_subject) is not None}
            for subject in subjects:
                await self._nc.publish(subject, _ACK)
            if subjects:
                await self._flusher.flush()
        except (nats.errors.Error, TimeoutError) as exc:
            for delivery in claimed:
                delivery.unclaim()
            raise BrokerUnavailableError(
                f"bulk ack of {len(claimed)} not confirmed: {exc!r}"
            ) from exc
        except BaseException:
            for delivery in claimed:
                delivery.unclaim()
            raise

    async def keep_alive(self, deliveries: Sequence[Delivery]) -> None:
        """An in-progress ack (``+WPI``) for each unsettled delivery: the server restarts
        its ack_wait timer and counts no new delivery. Not waited for; skipped while the
        connection is down."""
        if not self._nc.is_connected:
            return
        replies = {
            reply
            for delivery in deliveries
            if isinstance(delivery, NatsDelivery) and (reply := delivery.reply)
        }
        try:
            for reply in replies:
                await self._nc.publish(reply, _IN_PROGRESS)
        except nats.errors.Error as exc:
            log.debug("in-progress acks on partition %d: %r", self.partition, exc)

    def _deliveries(self, msg: Msg) -> list[NatsDelivery]:
        """One delivery per envelope of ``msg`` (the parts of a pack share its position,
        attempt and ack)."""
        md = msg.metadata
        envelopes = decode_all(
            msg.subject,
            msg.headers,
            msg.data,
            self._subjects.parse(msg.subject),
            fallback_id=f"{self._stream}:{md.sequence.stream}",
            fallback_time=md.timestamp.timestamp(),
        )
        position = md.sequence.stream
        self._lowest = min(self._lowest, position)
        stored = _Stored(
            msg.reply or "",
            len(envelopes),
            position=position,
            attempt=self._excusals.attempt(md.num_delivered, position),
            settler=self._settler,
        )
        return [NatsDelivery(stored, envelope) for envelope in envelopes]

    async def acked_below(self) -> int:
        """One past the consumer's ack floor (a stream sequence; the consumer filters
        this partition's subject, so every message of the partition at or below the floor
        is acked or terminated). ``TimeoutError`` when the server did not answer."""
        try:
            with anyio.fail_after(self._timeout):
                info = await self._psub.consumer_info()
        except (nats.errors.Error, TimeoutError) as exc:
            raise BrokerUnavailableError(
                f"consumer info of partition {self.partition}: {exc!r}"
            ) from exc
        floor = info.ack_floor.stream_seq if info.ack_floor is not None else 0
        return (floor or 0) + 1

    async def close(self) -> None:
        """Unsubscribe, and nak what the server sent that no fetch returned (the tail of
        the last pull request): the next owner gets it at once instead of after ack_wait.
        Unsettled deliveries may still be settled; the server redelivers the others after
        ack_wait to whoever fetches next, and their attempt does not count this delivery
        (the close excuses it; when the server does not answer, it counts). Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._on_close(self)
        with anyio.CancelScope(shield=True):
            with anyio.move_on_after(self._timeout):
                try:
                    await self._psub.unsubscribe()
                    await self._nak_unfetched()
                except nats.errors.Error as exc:  # connection already closed: nothing to undo
                    log.debug("unsubscribe of partition %d: %r", self.partition, exc)
            await self._excuse()

    async def _excuse(self) -> None:
        """Add what this subscription gives back to the consumer's excusal record."""
        try:
            with anyio.fail_after(2 * self._timeout):
                info = await self._psub.consumer_info()
                floor = (info.ack_floor.stream_seq if info.ack_floor is not None else 0) + 1
                delivered = info.delivered.stream_seq if info.delivered is not None else 0
                span = (max(self._lowest, floor), delivered)
                await self._records.add(info.name, self.log_id, span, floor)
        except (nats.errors.Error, TimeoutError) as exc:
            log.info(
                "partition %d closed without excusing its deliveries (they count toward "
                "max deliveries): %r",
                self.partition,
                exc,
            )

    def _untouched_surplus(self) -> list[str]:
        """The ack subjects of fetched messages no part of which a fetch returned."""
        waiting = collections.Counter(delivery.stored for delivery in self._surplus)
        self._surplus.clear()
        return [
            stored.reply
            for stored, count in waiting.items()
            if count == stored.parts == stored.unsettled and stored.reply
        ]

    async def _nak_unfetched(self) -> None:
        # nats-py keeps messages that arrived after a fetch returned in the subscription's
        # queue for the next fetch; after unsubscribe nobody would take them.
        queue: asyncio.Queue[Msg] | None = getattr(
            getattr(self._psub, "_sub", None), "_pending_queue", None
        )
        replies = self._untouched_surplus()
        while queue is not None and not queue.empty():
            msg = queue.get_nowait()
            if msg.reply:
                replies.append(msg.reply)
        naked = 0
        for reply in replies:
            if reply.startswith("$JS.ACK."):
                await self._nc.publish(reply, _NAK)
                naked += 1
        if naked:
            await self._flusher.flush()
            log.debug("partition %d: %d unfetched messages nak'd at close", self.partition, naked)
