"""``KafkaSubscription`` and ``KafkaDelivery``: JetStream-like deliveries on one Kafka partition.

Kafka has offsets, not per-message acks. A subscription reads exactly its partition through
the transport's reader (``_reader``: one group-less consumer for all of them; the group id
only names where offsets are committed), starts at the committed offset, and emulates the
port's per-message semantics on top (the ``Settlements``).

A record is one message, or a pack of several (``core.packing``, ``_codec.decode_all``): each
part is a delivery of its own, at the record's offset, settled, kept alive, expired and
redelivered on its own; the offset is settled once its last part is (acked,
dead-lettered, or skipped as a duplicate). Settlements are per offset, so after a close
or a crash every part of a record not wholly settled comes again, acked ones too (the
landed table settles each message at its position by its id: ``core.table``). Below,
"record" reads "every part of the record" for settling and "each part" for delivering.

- ``ack(deliveries)`` settles their offsets and commits the lowest unsettled offset (every
  offset below it is settled), with the settlements in the commit's metadata: one commit
  per bulk ack (none when no offset became settled). It returns once the commit is
  confirmed; a commit that fails raises ``BrokerUnavailableError`` (the records are settled
  locally and the next commit carries them; if none happens they are redelivered:
  at-least-once).
- the ack deadline: the subscription keeps every delivered, unsettled message in memory
  (at most ``max_ack_pending``, plus the parts of the records of one read; it stops
  reading the partition while full, and hands out no more than a fetch asks for: the
  rest of a pack waits for the next fetch, its ack deadline not started) and hands it out
  again, with ``attempt + 1``, once ``ack_wait`` has passed without a settlement or a
  ``keep_alive``. Chosen over seeking the consumer back to the lowest unacked offset: a
  seek re-reads (and would redeliver or have to filter) every later record, acked or in
  flight. Records are immutable, so a copy in memory is the record. Deadlines are acted on
  when somebody fetches (as on NATS and in the memory adapter).
- ``dead_letter(reason)``: the message (a pack's part alone) is copied to the dead-letter
  topic, then settled (the commit moves past its offset once the record is), then the
  hook runs.
- delivery counts are committed too (with ``track_deliveries``), before the fetch that
  made them returns, so a subscriber that takes the partition over (a handoff, a restart
  after a crash) delivers the records handed out before with ``attempt`` 2 and up, and a
  record that crashes its handler runs out of the consumer's retry budget
  (``core.retry``) instead of looping forever. First deliveries are covered by a
  reservation: a commit records the next ``DELIVERY_RESERVE`` offsets as delivered once
  already, so only a fetch that passes the reservation (or redelivers) commits. The price:
  after a crash, up to that many records never delivered come with attempt 2 (one attempt
  of their budget spent); ``close()`` commits the exact counts, less one delivery of
  every record it gives back unsettled (an excusal, see ``Settlements``): a handoff or a
  lost lease spends no attempt, a crash does. The subscription itself redelivers without
  bound. Counts are per offset: a record's count is that of its most delivered part (a
  part's own redeliveries within a subscription count only its own expiries; after a
  handoff or a crash, the record's parts come back with the record's count).
- duplicates: Kafka has no message-id de-duplication. A message (a part) whose id was seen
  at another offset of this partition within ``duplicate_window`` (by record timestamps;
  the last ``duplicate_cache`` ids) is settled without being delivered. The transport
  also skips re-publishing ids it already stored. A duplicate that reaches another
  subscriber is delivered: the sink's readers count duplicates by message id.

``close()`` commits the settlements and stops reading the partition; the next ``open()`` of the
partition resumes from that commit (that is the handoff). Settlements after close are
no-ops: those records come back to the next subscriber.

Commits are fenced. The subscription never joins the offsets group, so a plain
OffsetCommit is unconditional: a subscriber paused past its handoff would, on waking,
commit its old position over its successor's (moving the partition back, so acked records
come again). Instead each commit is a transaction of the partition's own transactional
producer (``transactional.id`` ``{offsets group}:{topic}:{partition}``): ``open()`` starts
that producer before it reads the committed offset, and the broker then refuses every
later commit of the earlier subscriber's producer (its epoch is stale). A refused commit
raises ``FencedError``; the subscription commits nothing after that.
"""

from __future__ import annotations

import heapq
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.lowlevel

from adapters.kafka._aiokafka import (
    ConsumerStoppedError,
    KafkaError,
    OffsetOutOfRangeError,
    ProducerFenced,
    stop_quietly,
)
from adapters.kafka._codec import decode_all, dedupe_key
from adapters.kafka._dead_letter import DeadLetters
from adapters.kafka._settings import KafkaSettings
from adapters.kafka._settlements import Settlements
from core.errors import BrokerUnavailableError, FencedError, PositionGoneError
from core.messages import Envelope
from core.model import Partition
from core.ports import Delivery
from core.retry import DeadLetterReason

__all__ = ["DELIVERY_RESERVE", "KafkaDelivery", "KafkaSubscription"]

# Offsets a commit records as delivered ahead of the fetches (see the module docstring):
# with a commit per non-empty fetch, each a transaction (the fence), a handler landed a
# third fewer messages per second.
DELIVERY_RESERVE = 2_000

log = logging.getLogger("shoal.adapters.kafka")


_Key = tuple[int, int]  # (offset, the part's place in its record)


@dataclass(slots=True, eq=False)
class _Entry:
    """One read, unsettled message: a record, or one part of a pack (in flight, or waiting
    for its first delivery or its redelivery)."""

    offset: int
    part: int  # its place in the record: 0 for a plain record
    envelope: Envelope
    attempt: int  # of its last delivery (before the first: one less than the first's)
    token: int = 0  # changes on every delivery and expiry: stale settlements are no-ops
    inflight: bool = False
    busy: bool = False  # dead_letter() is copying it to the dead-letter topic
    due: float = 0.0  # in flight: the ack deadline

    @property
    def key(self) -> _Key:
        return (self.offset, self.part)


class KafkaDelivery:
    """One fetched message (a record, or a part of a pack), settled by the subscription's
    bulk ``ack`` or by ``dead_letter``: the first settlement wins, later ones are no-ops.
    Settling a delivery that expired or was redelivered since (a stale one) is a no-op, as
    in the memory adapter."""

    __slots__ = ("_attempt", "_entry", "_settled", "_sub", "_token")

    def __init__(self, sub: KafkaSubscription, entry: _Entry) -> None:
        self._sub = sub
        self._entry = entry
        self._token = entry.token
        self._attempt = entry.attempt
        self._settled = False

    @property
    def envelope(self) -> Envelope:
        return self._entry.envelope

    @property
    def attempt(self) -> int:
        return self._attempt

    @property
    def position(self) -> int:
        """The record's offset (shared by the parts of a pack)."""
        return self._entry.offset

    async def dead_letter(self, reason: DeadLetterReason) -> None:
        """Copy to the dead-letter topic, settle, commit, run the hook. ``PublishError``
        when the copy was not confirmed (then nothing changed: it may be retried)."""
        if self._settled:
            await anyio.lowlevel.checkpoint()
            return
        self._settled = True
        try:
            await self._sub._dead_letter(self._entry, self._token, reason)
        except BaseException:
            self._settled = False
            raise


class KafkaSubscription:
    """One partition, read through the transport's reader (see the module docstring)."""

    def __init__(
        self,
        partition: Partition,
        consumer_id: str,
        *,
        consumer: Any,
        release: Callable[[anyio.CancelScope], Awaitable[None]],
        committer: Any,
        tp: Any,
        settlements: Settlements,
        settings: KafkaSettings,
        dead: DeadLetters,
        log_id: str,
        on_close: Callable[[KafkaSubscription], None],
    ) -> None:
        self.partition = partition
        self.consumer_id = consumer_id
        self._consumer = consumer  # the transport's reader, shared by its subscriptions
        self._release = release  # (a close's deadline) -> the reader stops reading it
        self._committer = committer  # the partition's transactional producer (the fence)
        self._tp = tp
        self._settlements = settlements
        self._s = settings
        self.ack_wait = settings.ack_wait
        # The cluster id and topic: a topic recreated under the same name in the same
        # cluster keeps it (aiokafka's metadata has no topic ids), see docs/limits.md.
        self.log_id = log_id
        self._dead = dead
        self._on_close = on_close
        self._entries: dict[_Key, _Entry] = {}
        self._unsettled: dict[int, int] = {}  # offset -> its parts in _entries
        self._timed: list[tuple[float, int, int, int]] = []  # heap of (due, offset, part, token)
        self._ready: list[_Key] = []  # heap of the messages to hand out
        self._recent: OrderedDict[str, tuple[int, int]] = OrderedDict()  # id -> (offset, ts)
        self._commit_lock = anyio.Lock()
        self._version = 0  # bumped on every settlements change
        self._synced = 0  # the version the last confirmed commit carried
        self._last_commit: tuple[int, str] | None = None
        self._opened_at = settlements.base  # committed before this subscription: all settled
        self._reserved = settlements.delivered_until  # the last commit's delivered mark
        self._wake: anyio.CancelScope | None = None
        self._closed = False
        self._fenced = False
        self._warned_truncated = False

    # -- fetch -------------------------------------------------------------------------

    async def fetch(self, max_messages: int, timeout: float) -> Sequence[Delivery]:  # noqa: ASYNC109
        """Up to ``max_messages`` deliveries (by offset and part: redeliveries and the rest of
        a pack first), [] when none
        came within ``timeout`` (also while the broker is unreachable). Raises
        ``anyio.ClosedResourceError`` after close()."""
        if self._closed:
            raise anyio.ClosedResourceError
        if max_messages < 1:
            raise ValueError("max_messages must be at least 1")
        deadline = anyio.current_time() + max(timeout, 0.0)
        while True:
            if self._closed:
                raise anyio.ClosedResourceError
            self._expire()
            out = self._take_ready(max_messages)
            room = min(max_messages - len(out), self._s.max_ack_pending - len(self._entries))
            if room > 0:
                wait = 0.0 if out else self._wake_at(deadline) - anyio.current_time()
                self._admit(await self._read(room, wait))
                out.extend(self._take_ready(max_messages - len(out)))
            elif not out:
                await self._sleep(self._wake_at(deadline) - anyio.current_time())
            if out:
                await self._sync_quietly()
                return out
            if self._synced != self._version:
                await self._sync_quietly()  # dead letters, duplicates, gaps
            if anyio.current_time() >= deadline:
                return []

    def _wake_at(self, deadline: float) -> float:
        return min(deadline, self._timed[0][0]) if self._timed else deadline

    async def _sleep(self, seconds: float) -> None:
        with anyio.CancelScope() as scope:
            self._wake = scope
            await anyio.sleep(max(seconds, 0.0))
        self._wake = None

    async def _read(self, n: int, wait: float) -> list[Any]:
        """Up to n records from the consumer's buffer, waiting up to ``wait`` for some."""
        records: list[Any] = []
        with anyio.CancelScope() as scope:
            self._wake = scope
            try:
                batch = await self._consumer.getmany(
                    self._tp, timeout_ms=max(int(wait * 1000), 0), max_records=n
                )
                records = list(batch.get(self._tp, ()))
            except ConsumerStoppedError:
                raise anyio.ClosedResourceError from None
            except OffsetOutOfRangeError as exc:
                # Resetting in place would read a re-created or cut-short log under the
                # offsets this subscription settled: ``open()`` decides from the commit.
                raise PositionGoneError(
                    f"Kafka: partition {self.partition} no longer holds offset "
                    f"{self._settlements.read_to} ({exc!r}): the topic was re-created, "
                    "lost its tail, or aged out below it"
                ) from exc
            except KafkaError as exc:
                log.warning("fetch on partition %d: %r", self.partition, exc)
                await anyio.sleep(max(wait, 0.0))
        self._wake = None
        if self._closed:
            raise anyio.ClosedResourceError
        return records

    def _poke(self) -> None:
        """Wake a fetch that waits (the subscription closed)."""
        if self._wake is not None:
            self._wake.cancel()

    def _admit(self, records: list[Any]) -> None:
        """Make fresh records ready to hand out, each part on its own: skip settled offsets
        and duplicates; a record delivered before (by an earlier subscriber) comes with its
        next attempt."""
        settlements = self._settlements
        for r in records:
            o = int(r.offset)
            if o < settlements.read_to:
                log.debug("partition %d: offset %d read again; skipped", self.partition, o)
                continue
            for gap in range(settlements.read_to, o):  # offsets without a record
                settlements.settle(gap)
                self._version += 1
            settlements.read_to = o + 1
            if settlements.is_settled(o):
                continue  # acked out of order by an earlier subscriber
            timestamp = int(r.timestamp or 0)
            parts = decode_all(
                r.headers,
                r.key,
                r.value,
                partition=self.partition,
                fallback_id=f"{self._s.topic}:{self.partition}:{o}",
                fallback_time=timestamp / 1000,
            )
            fresh = [
                (part, envelope)
                for part, envelope in enumerate(parts)
                if not self._duplicate(dedupe_key(r.headers, envelope.message_id), o, timestamp)
            ]
            if not fresh:
                settlements.settle(o)
                self._version += 1
                continue
            # a count a close excused down to 0 is not covered by the reservation
            excused = settlements.counts.get(o) == 0
            attempt = settlements.delivered(o)
            if self._s.track_deliveries and (attempt > 1 or o >= self._reserved or excused):
                self._version += 1
            self._unsettled[o] = len(fresh)
            for part, envelope in fresh:
                self._entries[o, part] = _Entry(o, part, envelope, attempt - 1)
                heapq.heappush(self._ready, (o, part))

    def _duplicate(self, key: str, offset: int, timestamp: int) -> bool:
        s = self._s
        if s.duplicate_cache <= 0 or s.duplicate_window <= 0:
            return False
        seen = self._recent.get(key)
        if (
            seen is not None
            and seen[0] != offset
            and abs(timestamp - seen[1]) <= (s.duplicate_window * 1000)
        ):
            return True
        self._recent[key] = (offset, timestamp)
        self._recent.move_to_end(key)
        while len(self._recent) > s.duplicate_cache:
            self._recent.popitem(last=False)
        return False

    def _expire(self) -> None:
        """Act on every deadline passed: the message is ready again."""
        now = anyio.current_time()
        while self._timed and self._timed[0][0] <= now:
            _, o, part, token = heapq.heappop(self._timed)
            entry = self._entries.get((o, part))
            if entry is None or entry.token != token or entry.busy:
                continue  # settled, superseded, or being terminated
            if entry.inflight and entry.due > now:  # kept alive since
                heapq.heappush(self._timed, (entry.due, o, part, token))
                continue
            entry.inflight = False
            entry.token += 1
            heapq.heappush(self._ready, entry.key)

    def _take_ready(self, n: int) -> list[Delivery]:
        """Hand out up to ``n`` ready messages, each with its next attempt: the offset's
        count grows when a part is delivered more often than any part before it."""
        out: list[Delivery] = []
        now = anyio.current_time()
        settlements = self._settlements
        while self._ready and len(out) < n:
            entry = self._entries.get(heapq.heappop(self._ready))
            if entry is None or entry.inflight or entry.busy:
                continue
            entry.attempt += 1
            if entry.attempt > settlements.count(entry.offset):
                entry.attempt = settlements.delivered(entry.offset)
                if self._s.track_deliveries:
                    self._version += 1
            entry.token += 1
            entry.inflight = True
            entry.due = now + self._s.ack_wait
            heapq.heappush(self._timed, (entry.due, entry.offset, entry.part, entry.token))
            out.append(KafkaDelivery(self, entry))
        return out

    # -- settlement --------------------------------------------------------------------

    async def ack(self, deliveries: Sequence[Delivery]) -> None:
        """Settle every delivery of this subscription, then one commit for all of them;
        ``TimeoutError`` when it was not confirmed."""
        for delivery in deliveries:
            if (
                isinstance(delivery, KafkaDelivery)
                and delivery._sub is self
                and not delivery._settled
            ):
                delivery._settled = True
                self._ack(delivery._entry, delivery._token)
        await self._sync()

    async def keep_alive(self, deliveries: Sequence[Delivery]) -> None:
        """Push the ack deadline of every unsettled delivery back by ``ack_wait`` (local
        only: Kafka has no per-record deadline; the subscription keeps them)."""
        await anyio.lowlevel.checkpoint()
        due = anyio.current_time() + self._s.ack_wait
        for delivery in deliveries:
            if (
                isinstance(delivery, KafkaDelivery)
                and delivery._sub is self
                and not delivery._settled
                and self._holds(delivery._entry, delivery._token)
            ):
                delivery._entry.due = due

    def _holds(self, entry: _Entry, token: int) -> bool:
        return (
            not self._closed
            and self._entries.get(entry.key) is entry
            and entry.token == token
            and entry.inflight
            and not entry.busy
        )

    def _settle(self, entry: _Entry) -> None:
        """Settle one message; its offset once it was the record's last unsettled part."""
        del self._entries[entry.key]
        entry.inflight = False
        entry.busy = False
        entry.token += 1
        left = self._unsettled[entry.offset] - 1
        if left:
            self._unsettled[entry.offset] = left
            return
        del self._unsettled[entry.offset]
        self._settlements.settle(entry.offset)
        self._version += 1

    def _ack(self, entry: _Entry, token: int) -> None:
        if self._holds(entry, token):
            self._settle(entry)

    async def _dead_letter(self, entry: _Entry, token: int, reason: DeadLetterReason) -> None:
        if not self._holds(entry, token):
            await anyio.lowlevel.checkpoint()
            return
        entry.busy = True
        attempts = entry.attempt
        source = f"{self._s.topic}/{self.partition}/{entry.offset}"
        try:
            await self._dead.store(entry.envelope, reason, attempts, source)
        except BaseException:
            entry.busy = False
            if entry.due <= anyio.current_time():  # its deadline passed while busy
                heapq.heappush(self._timed, (entry.due, entry.offset, entry.part, entry.token))
            raise
        self._settle(entry)
        try:
            await self._sync()
        except (TimeoutError, FencedError) as exc:
            log.warning(
                "partition %d: commit after a dead letter not confirmed: %s", self.partition, exc
            )
        await self._dead.notify(entry.envelope, reason, attempts)

    # -- commits -----------------------------------------------------------------------

    async def _sync(self, *, force: bool = False) -> None:
        """Commit the settlements unless a confirmed commit already carries every change made
        before this call (a group commit). ``TimeoutError`` when not confirmed in time,
        ``FencedError`` once a newer subscriber opened the partition."""
        want = self._version
        if self._synced >= want and not force:
            await anyio.lowlevel.checkpoint()
            return
        # One turn of the event loop first: acks started together (a batch) all mark
        # their offsets before the first of them snapshots the settlements, so one commit
        # carries the whole batch.
        await anyio.lowlevel.checkpoint()
        async with self._commit_lock:
            if self._synced >= want and not force:
                return
            version = self._version
            settlements = self._settlements
            reserve = self._reserved
            if self._s.track_deliveries and not self._closed:
                if settlements.delivered_until > reserve:
                    reserve = settlements.delivered_until + DELIVERY_RESERVE
            else:
                reserve = 0  # closing: the exact counts
            state = (settlements.base, settlements.metadata(reserve_to=reserve))
            if settlements.truncated and not self._warned_truncated:
                self._warned_truncated = True
                log.warning(
                    "partition %d: too many out-of-order settlements for the commit "
                    "metadata; some acked messages may be redelivered after a handoff",
                    self.partition,
                )
            if state != self._last_commit:
                await self._commit(state)
                self._last_commit = state
                self._reserved = reserve
            self._synced = max(self._synced, version)

    async def _commit(self, state: tuple[int, str]) -> None:
        """One transaction that commits ``state`` (offset, metadata) for the partition."""
        if self._fenced:
            raise FencedError(f"partition {self.partition}: a newer subscriber opened it")
        committer = self._committer
        try:
            with anyio.fail_after(self._s.request_timeout):
                async with committer.transaction():
                    await committer.send_offsets_to_transaction(
                        {self._tp: state}, self._s.offsets_group_id
                    )
        except ProducerFenced as exc:
            self._fenced = True
            log.warning(
                "partition %d: commit at offset %d refused, a newer subscriber opened the "
                "partition (this one was superseded while it was paused or cut off)",
                self.partition,
                state[0],
            )
            raise FencedError(
                f"partition {self.partition}: commit refused, a newer subscriber opened it"
            ) from exc
        except (KafkaError, TimeoutError) as exc:
            raise BrokerUnavailableError(
                f"commit of partition {self.partition} at offset {state[0]} not confirmed: {exc!r}"
            ) from exc

    def confirmed_commit(self) -> tuple[int, str] | None:
        """The (offset, metadata) of the last commit the broker confirmed to this
        subscription, None before its first."""
        return self._last_commit

    async def acked_below(self) -> int:
        """The committed offset this subscription last confirmed (or started from): every
        record below it is settled. Out-of-order settlements above it (in the commit's
        metadata) do not count: the floor may lag, never lead."""
        await anyio.lowlevel.checkpoint()
        return self._last_commit[0] if self._last_commit is not None else self._opened_at

    async def _sync_quietly(self) -> None:
        try:
            await self._sync()
        except TimeoutError as exc:
            log.warning("%s (retried with the next settlement)", exc)
        except FencedError:
            pass  # logged once, when the broker refused

    # -- close -------------------------------------------------------------------------

    async def close(self) -> None:
        """Commit what is settled (and the delivery counts, less one delivery of each
        unsettled record: the close excuses it), stop reading the partition. The next open() of the
        partition resumes from this commit; unsettled records come back to it at once,
        with the attempt they had. A commit that fails leaves their deliveries counted.
        Idempotent."""
        if self._closed:
            return
        self._closed = True
        for offset in self._unsettled:
            self._settlements.excuse(offset)
        self._version += 1
        self._on_close(self)
        self._poke()
        with anyio.CancelScope(shield=True), anyio.move_on_after(self._s.close_timeout) as scope:
            try:
                await self._sync(force=True)
            except TimeoutError as exc:
                log.warning("closing partition %d: %s", self.partition, exc)
            except FencedError:
                pass  # superseded: its successor's commits stand
            await self._release(scope)
            await stop_quietly(
                self._committer, "stop", scope, f"committer of partition {self.partition}"
            )
