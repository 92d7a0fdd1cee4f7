"""``InMemoryTransport``: the Transport port in one process, with JetStream's semantics.

Per partition, one work queue shared by every subscription of that partition (like the
one durable consumer per partition on NATS):

- ``publish`` stores each envelope unless its ``message_id`` was stored less than
  ``duplicate_window`` seconds ago (then it is silently confirmed, not stored again);
- ``fetch`` hands out the oldest ready messages (by publish order) and starts their ack
  timer; a delivery not settled within ``ack_wait`` becomes ready again with
  ``attempt + 1``;
- a dead-lettered message is removed and handed to the dead-letter hook (redelivery has
  no bound: the consumer applies the retry budget, ``core.retry``);
- a subscription's ``close`` excuses what it was delivered (``core.retry.Excusals``, one
  record per partition, read by the next ``open``): a message given back that way comes
  again with the attempt it had; one whose subscription was just dropped (a crash) with
  the next;
- ``backlog`` counts stored messages not yet acked (ready, delayed and in flight);
  ``oldest_unacked`` is when the first of them was stored, by the ``clock`` given (the
  wall clock by default);
- a message's ``position`` is its seq: one counter over every partition, so positions of
  one partition grow with publish order but have gaps (as NATS stream sequences do);
- every stored message is also kept, with that store time, in ``history`` (as a
  limits-retention stream keeps consumed messages): ``InMemoryHistory`` reads it.

Deadlines are on the event loop's clock (``anyio.current_time``). As on NATS, they are
acted on when somebody looks (fetch, backlog), not by a background task. Nothing survives
the process: the ``persistent`` feature is false.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

import anyio
import anyio.lowlevel

from adapters._dead_letter import DeadLetterHook, DeadLetterReason, log_dead_letter
from adapters._lifecycle import Lifecycle
from core.messages import Envelope, is_valid_project_id
from core.model import Partition
from core.ports import Delivery, Subscription, TransportFeatures
from core.replay import StoredMessage
from core.retry import Excusals

__all__ = ["InMemoryTransport"]

log = logging.getLogger("shoal.adapters.memory")


@dataclass(slots=True)
class _Entry:
    seq: int
    envelope: Envelope
    stored_at: float
    deliveries: int = 0
    token: int = 0  # changes on every delivery, nak and expiry: stale settlements are no-ops
    inflight: bool = False
    due: float = 0.0  # in flight: the ack deadline (``keep_alive`` pushes it back)


@dataclass(slots=True)
class _Queue:
    entries: dict[int, _Entry] = field(default_factory=dict)  # every unsettled message
    ready: list[int] = field(default_factory=list)  # heap of seq
    timed: list[tuple[float, int, int]] = field(default_factory=list)  # heap (due, seq, token)
    changed: anyio.Event = field(default_factory=anyio.Event)

    def notify(self) -> None:
        self.changed.set()
        self.changed = anyio.Event()

    def next_due(self) -> float | None:
        return self.timed[0][0] if self.timed else None


class InMemoryTransport(Lifecycle):
    """In-process Transport. ``async with InMemoryTransport(...) as t:``; all state is lost
    when the object goes away. ``registrations`` records ``reply_registration`` calls."""

    features: ClassVar[TransportFeatures] = TransportFeatures(
        "memory", datacenters="an in-process transport has no clusters to route between"
    )

    def __init__(
        self,
        *,
        ack_wait: float = 5.0,
        duplicate_window: float = 120.0,
        dead_letter: DeadLetterHook | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if ack_wait <= 0 or duplicate_window < 0:
            raise ValueError("need ack_wait > 0 and duplicate_window >= 0")
        self.ack_wait = ack_wait
        self.duplicate_window = duplicate_window
        self._hook = dead_letter or log_dead_letter
        self._clock = clock
        self._queues: dict[Partition, _Queue] = {}
        self._excusals: dict[Partition, Excusals] = {}
        self._seen: OrderedDict[str, float] = OrderedDict()  # message_id -> stored at
        self._seq = itertools.count(1)
        self._next_seq = 1  # the seq the next stored message gets
        self.log_id = f"memory:{uuid.uuid4().hex}"  # one log per transport object
        self._dead_letters = 0
        self.registrations: list[tuple[Partition, str, str]] = []
        self.history: dict[Partition, list[StoredMessage]] = {}

    @property
    def dead_letters(self) -> int:
        return self._dead_letters

    # -- the port --------------------------------------------------------------------

    async def publish(self, envelopes: Sequence[Envelope]) -> None:
        """Store every envelope (each message id once per ``duplicate_window``).
        Raises ``ValueError`` before storing anything when an envelope is invalid."""
        for e in envelopes:
            if not is_valid_project_id(e.project_id):
                raise ValueError(f"project_id {e.project_id!r} is not one safe subject token")
            if e.partition < 0:
                raise ValueError(f"partition {e.partition} is negative")
            if not e.message_id:
                raise ValueError("message_id is empty")
        await anyio.lowlevel.checkpoint()
        now = anyio.current_time()
        while self._seen and next(iter(self._seen.values())) <= now - self.duplicate_window:
            self._seen.popitem(last=False)
        touched: set[Partition] = set()
        stored_at = self._clock()
        for e in envelopes:
            if e.message_id in self._seen:
                continue
            self._seen[e.message_id] = now
            q = self._queue(e.partition)
            entry = _Entry(next(self._seq), e, stored_at)
            self._next_seq = entry.seq + 1
            q.entries[entry.seq] = entry
            heapq.heappush(q.ready, entry.seq)
            self.history.setdefault(e.partition, []).append(StoredMessage(e, entry.seq, stored_at))
            touched.add(e.partition)
        for p in touched:
            self._queues[p].notify()

    async def open(self, partition: Partition, consumer_id: str) -> Subscription:
        await anyio.lowlevel.checkpoint()
        return _Subscription(
            self, partition, consumer_id, self._excusals.get(partition, Excusals())
        )

    async def backlog(self, partition: Partition) -> int:
        await anyio.lowlevel.checkpoint()
        self._expire(partition)
        return len(self._queue(partition).entries)

    async def oldest_unacked(self, partition: Partition) -> float | None:
        await anyio.lowlevel.checkpoint()
        entries = self._queue(partition).entries
        return entries[min(entries)].stored_at if entries else None

    async def trim_landed(self, partitions: int) -> int:
        """0: an ack removes the message here already."""
        await anyio.lowlevel.checkpoint()
        return 0

    async def reply_registration(self, partition: Partition, project_id: str, by: str) -> None:
        if not is_valid_project_id(project_id):
            raise ValueError(f"project_id {project_id!r} is not one safe subject token")
        await anyio.lowlevel.checkpoint()
        self.registrations.append((partition, project_id, by))

    # -- the queue -------------------------------------------------------------------

    def _queue(self, partition: Partition) -> _Queue:
        q = self._queues.get(partition)
        if q is None:
            q = self._queues[partition] = _Queue()
        return q

    def _expire(self, partition: Partition) -> None:
        """Act on every deadline passed: the message is ready again."""
        q = self._queue(partition)
        now = anyio.current_time()
        while q.timed and q.timed[0][0] <= now:
            _, seq, token = heapq.heappop(q.timed)
            entry = q.entries.get(seq)
            if entry is None or entry.token != token:
                continue  # settled, or delivered again since
            if entry.inflight and entry.due > now:  # kept alive since
                heapq.heappush(q.timed, (entry.due, seq, token))
                continue
            entry.inflight = False
            entry.token += 1
            heapq.heappush(q.ready, seq)

    def _take(self, partition: Partition, max_messages: int, excusals: Excusals) -> list[_Delivery]:
        q = self._queue(partition)
        due = anyio.current_time() + self.ack_wait
        out: list[_Delivery] = []
        while q.ready and len(out) < max_messages:
            entry = q.entries[heapq.heappop(q.ready)]
            entry.deliveries += 1
            entry.token += 1
            entry.inflight = True
            entry.due = due
            heapq.heappush(q.timed, (due, entry.seq, entry.token))
            attempt = excusals.attempt(entry.deliveries, entry.seq)
            out.append(_Delivery(self, partition, entry.seq, entry.token, entry, attempt=attempt))
        return out

    def _settle(self, partition: Partition, seq: int, token: int) -> _Entry | None:
        """Remove the message if this delivery still holds it; None when stale."""
        q = self._queue(partition)
        entry = q.entries.get(seq)
        if entry is None or entry.token != token or not entry.inflight:
            return None
        del q.entries[seq]
        q.notify()
        return entry

    def _keep_alive(self, partition: Partition, seq: int, token: int) -> None:
        entry = self._queue(partition).entries.get(seq)
        if entry is not None and entry.token == token and entry.inflight:
            entry.due = anyio.current_time() + self.ack_wait

    async def _dead(self, envelope: Envelope, reason: DeadLetterReason, attempts: int) -> None:
        self._dead_letters += 1
        try:
            await self._hook(envelope, reason, attempts)
        except Exception:
            log.exception("dead-letter hook failed for message %s", envelope.message_id)


class _Delivery:
    __slots__ = ("_attempt", "_envelope", "_partition", "_seq", "_settled", "_t", "_token")

    def __init__(
        self,
        t: InMemoryTransport,
        partition: Partition,
        seq: int,
        token: int,
        entry: _Entry,
        *,
        attempt: int,
    ) -> None:
        self._t = t
        self._partition = partition
        self._seq = seq
        self._token = token
        self._envelope = entry.envelope
        self._attempt = attempt
        self._settled = False

    @property
    def envelope(self) -> Envelope:
        return self._envelope

    @property
    def attempt(self) -> int:
        return self._attempt

    @property
    def position(self) -> int:
        return self._seq

    def _first(self) -> bool:
        first, self._settled = not self._settled, True
        return first

    async def dead_letter(self, reason: DeadLetterReason) -> None:
        await anyio.lowlevel.checkpoint()
        if self._first():
            entry = self._t._settle(self._partition, self._seq, self._token)
            if entry is not None:
                await self._t._dead(entry.envelope, reason, self._attempt)


class _Subscription:
    def __init__(
        self, t: InMemoryTransport, partition: Partition, consumer_id: str, excusals: Excusals
    ) -> None:
        self._t = t
        self.partition = partition
        self.consumer_id = consumer_id
        self.ack_wait = t.ack_wait
        self.log_id = t.log_id
        self._excusals = excusals  # as the partition's last close left them
        self._delivered: tuple[int, int] | None = None  # lowest and highest seq fetched
        self._closed = False

    async def fetch(self, max_messages: int, timeout: float) -> Sequence[Delivery]:  # noqa: ASYNC109
        """Up to ``max_messages`` deliveries, [] when none came within ``timeout``.
        Raises ``anyio.ClosedResourceError`` after close()."""
        if max_messages < 1:
            raise ValueError("max_messages must be at least 1")
        await anyio.lowlevel.checkpoint()
        deadline = anyio.current_time() + max(timeout, 0.0)
        q = self._t._queue(self.partition)
        while True:
            if self._closed:
                raise anyio.ClosedResourceError
            self._t._expire(self.partition)
            got = self._t._take(self.partition, max_messages, self._excusals)
            if got:
                seqs = [d.position for d in got]
                low, high = self._delivered or (seqs[0], seqs[0])
                self._delivered = (min(low, *seqs), max(high, *seqs))
                return got
            now = anyio.current_time()
            if now >= deadline:
                return []
            due = q.next_due()
            wake = deadline if due is None else min(deadline, due)
            with anyio.move_on_after(max(wake - now, 0.0)):
                await q.changed.wait()

    async def ack(self, deliveries: Sequence[Delivery]) -> None:
        await anyio.lowlevel.checkpoint()
        for delivery in deliveries:
            if isinstance(delivery, _Delivery) and delivery._first():
                self._t._settle(delivery._partition, delivery._seq, delivery._token)

    async def keep_alive(self, deliveries: Sequence[Delivery]) -> None:
        await anyio.lowlevel.checkpoint()
        for delivery in deliveries:
            if isinstance(delivery, _Delivery) and not delivery._settled:
                self._t._keep_alive(delivery._partition, delivery._seq, delivery._token)

    async def acked_below(self) -> int:
        """The oldest unsettled message of the partition, or the next seq to be stored."""
        await anyio.lowlevel.checkpoint()
        entries = self._t._queue(self.partition).entries
        return min(entries) if entries else self._t._next_seq

    async def close(self) -> None:
        """Stop fetching, and excuse what this subscription was delivered. Unsettled
        deliveries come back to whoever fetches after ack_wait (they may still be settled
        until then). Idempotent."""
        await anyio.lowlevel.checkpoint()
        if self._closed:
            return
        self._closed = True
        if self._delivered is not None:
            floor = await self.acked_below()
            record = self._t._excusals.get(self.partition, Excusals()).above(floor)
            self._t._excusals[self.partition] = record.excusing(
                max(floor, self._delivered[0]), self._delivered[1]
            )
