"""The Transport contract, written once and run against every adapter (Watermill style).

An adapter's test module subclasses ``TransportContract`` and supplies:

- ``features``: what the adapter promises (checks that do not apply are skipped);
- a ``make_transport`` fixture (in the class or its module): a factory
  ``(dead_letter_hook) -> async context manager`` returning a fresh, isolated transport
  with ack_wait ``ACK_WAIT`` and the default duplicate window;
- for ``persistent`` adapters, a ``crash_and_restart`` fixture: an async callable that
  kills the server (kill -9) and brings it back with its data;
- for adapters with positions of one's own (the broadcast mode), a ``make_transport_at``
  fixture: like ``make_transport``, with the position's name as a second argument.

The class name does not start with ``Test``, so pytest collects it only through subclasses.
Every wait is bounded by ``anyio.fail_after``; no sleep is used as synchronisation.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

import anyio
import pytest

from core.errors import FencedError
from core.messages import Envelope, MessageKind
from core.ports import Delivery, Subscription, Transport
from tests._unavailable import not_applicable

ACK_WAIT = 1.0
REDELIVERIES = 3  # deliveries a test lets expire in a row
# Subscriptions closed in a row with a message unsettled: one more than the default
# SHOAL_HANDLER_MAX_DELIVER (10), each close an ack wait (the handler-level test in
# tests/service/test_landing_faults.py drops a partition 20 times).
REBALANCES = 11
LIMIT = 15.0  # seconds any single check may take
STORE_GAP = 0.05  # seconds between publishes whose store times a test compares


@dataclass(frozen=True)
class Features:
    persistent: bool = False  # stored messages survive a server crash (kill -9) + restart
    redelivery_after_ack_wait: bool = True  # an unsettled delivery comes back after ack_wait
    # two open subscriptions of one partition split its messages (the shared mode)
    competing_subscriptions: bool = False


class DeadLetterLog:
    """A dead-letter hook that records ``(envelope, reason, attempts)``."""

    def __init__(self) -> None:
        self.items: list[tuple[Envelope, str, int]] = []

    async def __call__(self, envelope: Envelope, reason: Any, attempts: int) -> None:
        self.items.append((envelope, str(reason), attempts))


class ClosableTransport(Transport, Protocol):
    @property
    def dead_letters(self) -> int: ...


TransportFactory = Callable[[DeadLetterLog], AbstractAsyncContextManager[ClosableTransport]]
PositionedFactory = Callable[[DeadLetterLog, str], AbstractAsyncContextManager[ClosableTransport]]


def envelope(
    partition: int = 0,
    project: str = "projA",
    sequence: int = 1,
    kind: MessageKind = MessageKind.DATA,
    payload: bytes | None = None,
) -> Envelope:
    return Envelope(
        message_id=f"m-{uuid.uuid4().hex}",
        project_id=project,
        partition=partition,
        gateway_id="gw 1/ü",  # not a header-safe token on purpose
        sequence=sequence,
        received_at=time.time(),
        payload=payload if payload is not None else f"body {sequence}".encode(),
        kind=kind,
    )


async def fetch_n(sub: Subscription, n: int, *, limit: float = LIMIT) -> list[Delivery]:
    """Exactly ``n`` deliveries (fails after ``limit`` seconds)."""
    got: list[Delivery] = []
    with anyio.fail_after(limit):
        while len(got) < n:
            got.extend(await sub.fetch(n - len(got), 0.5))
    assert len(got) == n
    return got


async def publish_each(transport: Transport, envelopes: list[Envelope]) -> None:
    """One publish per envelope, so each gets a position of its own: envelopes published
    together may share one (a pack, ``core.packing``) and are then settled together at the
    broker."""
    for e in envelopes:
        await transport.publish([e])


async def fetch_none(sub: Subscription, seconds: float) -> None:
    """Nothing is delivered for ``seconds``."""
    assert list(await sub.fetch(10, seconds)) == []


class TransportContract:
    """Subclass as ``Test<Adapter>Transport`` and provide ``features``/``make_transport``."""

    pytestmark: ClassVar[list[pytest.MarkDecorator]] = [pytest.mark.anyio]
    features: ClassVar[Features] = Features()

    @pytest.fixture
    def crash_and_restart(self) -> Callable[[], Awaitable[None]]:
        """For persistent adapters: kill -9 the server, restart it on the same data."""

        async def unsupported() -> None:
            not_applicable("adapter cannot crash its server")

        return unsupported

    @pytest.fixture
    def make_transport_at(self) -> PositionedFactory:
        """For adapters with positions of one's own: ``(dead, position) -> transport``."""
        not_applicable("adapter has no positions of its own")

    @pytest.fixture
    def dead(self) -> DeadLetterLog:
        return DeadLetterLog()

    @pytest.fixture
    async def transport(
        self, make_transport: TransportFactory, dead: DeadLetterLog
    ) -> AsyncIterator[ClosableTransport]:
        async with make_transport(dead) as t:
            yield t

    # -- publish and fetch -------------------------------------------------------------

    async def test_fetch_returns_exactly_the_published_envelopes_when_published(
        self, transport: ClosableTransport
    ) -> None:
        sent = [
            envelope(1, "projA", 1, MessageKind.ANNOUNCE, b""),
            envelope(1, "projA", 2, payload=bytes(range(256))),
            envelope(1, "proj-B_2", 1, payload=b"\x00\r\n"),
        ]
        await transport.publish(sent)
        sub = await transport.open(1, "h1")
        got = await fetch_n(sub, 3)
        assert sorted((d.envelope for d in got), key=str) == sorted(sent, key=str)
        assert [d.attempt for d in got] == [1, 1, 1]
        await sub.ack(got)
        await fetch_none(sub, 0.3)
        await sub.close()

    async def test_fetch_keeps_publish_order_when_one_partition(
        self, transport: ClosableTransport
    ) -> None:
        sent = [envelope(0, f"p{i % 3}", i) for i in range(1, 31)]
        await transport.publish(sent)
        sub = await transport.open(0, "h1")
        got = await fetch_n(sub, 30)
        assert [d.envelope.message_id for d in got] == [e.message_id for e in sent]
        await sub.ack(got)

    async def test_fetch_returns_empty_when_nothing_arrives_in_timeout(
        self, transport: ClosableTransport
    ) -> None:
        sub = await transport.open(3, "h1")
        start = anyio.current_time()
        with anyio.fail_after(5):
            assert list(await sub.fetch(10, 0.3)) == []
        assert anyio.current_time() - start >= 0.2

    async def test_publish_rejects_the_batch_when_a_project_id_is_unsafe(
        self, transport: ClosableTransport
    ) -> None:
        good, bad = envelope(0, "ok"), envelope(0, "a.b")
        with pytest.raises(ValueError):
            await transport.publish([good, bad])
        assert await transport.backlog(0) == 0

    async def test_publish_stores_once_when_message_id_is_published_twice(
        self, transport: ClosableTransport
    ) -> None:
        e = envelope(2)
        await transport.publish([e])
        await transport.publish([e])  # a retry after a lost confirmation
        await transport.publish([e, e])
        sub = await transport.open(2, "h1")
        (d,) = await fetch_n(sub, 1)
        assert d.envelope == e
        await sub.ack([d])
        await fetch_none(sub, 0.5)
        assert await transport.backlog(2) == 0

    # -- positions and the ack floor ---------------------------------------------------

    async def test_positions_grow_with_publish_order_and_stay_on_redelivery(
        self, transport: ClosableTransport
    ) -> None:
        sent = [envelope(2, "pos", i) for i in range(1, 21)]
        await publish_each(transport, sent[:10])
        await transport.publish([envelope(5, "other", i) for i in range(1, 6)])  # interleaved
        await publish_each(transport, sent[10:])
        sub = await transport.open(2, "h1")
        got = await fetch_n(sub, 20)
        positions = {d.envelope.message_id: d.position for d in got}
        in_order = [positions[e.message_id] for e in sent]
        assert in_order == sorted(set(in_order)), "distinct, growing with publish order"
        await sub.ack(got[1:])
        await sub.close()
        again = await transport.open(2, "h2")
        (back,) = await fetch_n(again, 1, limit=ACK_WAIT + 5)
        assert back.envelope == got[0].envelope and back.position == got[0].position
        assert again.log_id == sub.log_id != "", "one log, whichever subscription reads it"
        await again.ack([back])

    async def test_acked_below_covers_exactly_the_acked_prefix(
        self, transport: ClosableTransport
    ) -> None:
        sent = [envelope(4, "floor", i) for i in range(1, 11)]
        await publish_each(transport, sent)
        sub = await transport.open(4, "h1")
        got = sorted(await fetch_n(sub, 10), key=lambda d: d.position)
        before = await sub.acked_below()
        assert before <= got[0].position, "nothing acked yet: the floor is at most the first"
        await sub.ack(got[:4])
        await sub.ack(got[6:])  # out of order: 4 and 5 are still unacked
        with anyio.fail_after(LIMIT):
            # The broker's own state is the point of truth, and it offers no event.
            while (floor := await sub.acked_below()) < got[4].position:  # noqa: ASYNC110
                await anyio.sleep(0.05)
        assert got[3].position < floor <= got[4].position, "never past an unacked message"
        await sub.ack(got[4:6])
        with anyio.fail_after(LIMIT):
            while (floor := await sub.acked_below()) <= got[9].position:  # noqa: ASYNC110
                await anyio.sleep(0.05)
        await sub.close()

    # -- settlement --------------------------------------------------------------------

    async def test_redelivers_with_attempt_2_when_not_acked_within_ack_wait(
        self, transport: ClosableTransport
    ) -> None:
        if not self.features.redelivery_after_ack_wait:
            not_applicable("adapter has no per-message ack_wait")
        e = envelope(0)
        await transport.publish([e])
        sub = await transport.open(0, "h1")
        await fetch_n(sub, 1)
        start = anyio.current_time()
        (second,) = await fetch_n(sub, 1, limit=ACK_WAIT + 5)
        assert anyio.current_time() - start >= ACK_WAIT * 0.7
        assert (second.envelope, second.attempt) == (e, 2)
        await sub.ack([second])

    async def test_settling_again_is_a_no_op_when_already_acked(
        self, transport: ClosableTransport, dead: DeadLetterLog
    ) -> None:
        await transport.publish([envelope(0)])
        sub = await transport.open(0, "h1")
        (d,) = await fetch_n(sub, 1)
        await sub.ack([d])
        await sub.ack([d])
        await d.dead_letter("unprocessable")
        await fetch_none(sub, ACK_WAIT * 1.5)
        assert dead.items == []
        assert await transport.backlog(0) == 0

    async def test_bulk_ack_settles_every_delivery_in_one_call(
        self, transport: ClosableTransport
    ) -> None:
        sent = [envelope(0, "bulk", i) for i in range(1, 201)]
        await transport.publish(sent)
        sub = await transport.open(0, "h1")
        got = await fetch_n(sub, 200)
        await sub.ack(got)
        await sub.ack(got[:10])  # settled already: a no-op
        await fetch_none(sub, ACK_WAIT * 1.5)
        assert await transport.backlog(0) == 0
        await sub.close()
        again = await transport.open(0, "h2")
        await fetch_none(again, 0.5)

    async def test_keep_alive_holds_a_delivery_past_ack_wait_without_a_redelivery(
        self, transport: ClosableTransport
    ) -> None:
        if not self.features.redelivery_after_ack_wait:
            not_applicable("adapter has no per-message ack_wait")
        e = envelope(0)
        await transport.publish([e])
        sub = await transport.open(0, "h1")
        assert sub.ack_wait == pytest.approx(ACK_WAIT)
        (d,) = await fetch_n(sub, 1)
        held_until = anyio.current_time() + ACK_WAIT * 2.5
        while anyio.current_time() < held_until:
            await sub.keep_alive([d])
            # nothing comes back while it is kept alive (this also paces the keep-alives)
            assert list(await sub.fetch(1, ACK_WAIT / 3)) == []
        await sub.ack([d])
        await fetch_none(sub, ACK_WAIT * 1.5)
        assert await transport.backlog(0) == 0

    async def test_dead_letter_stores_it_once_and_never_redelivers(
        self, transport: ClosableTransport, dead: DeadLetterLog
    ) -> None:
        e = envelope(0)
        await transport.publish([e])
        sub = await transport.open(0, "h1")
        (d,) = await fetch_n(sub, 1)
        await d.dead_letter("unprocessable")
        await d.dead_letter("unprocessable")
        await sub.ack([d])
        assert dead.items == [(e, "unprocessable", 1)]
        await fetch_none(sub, ACK_WAIT * 1.5)
        assert await transport.backlog(0) == 0
        assert transport.dead_letters == 1

    async def test_redelivers_without_bound_counting_attempts_until_the_consumer_gives_up(
        self, transport: ClosableTransport, dead: DeadLetterLog
    ) -> None:
        if not self.features.redelivery_after_ack_wait:
            not_applicable("adapter has no per-message ack_wait")
        e, other = envelope(0, sequence=1), envelope(0, sequence=2)
        await transport.publish([e])
        sub = await transport.open(0, "h1")
        attempts: list[int] = []
        with anyio.fail_after(LIMIT + REDELIVERIES * ACK_WAIT):
            while len(attempts) <= REDELIVERIES:  # each delivery left to expire
                attempts.extend(d.attempt for d in await sub.fetch(10, 0.3))
        assert attempts == list(range(1, REDELIVERIES + 2)), "the transport never gives up"
        assert dead.items == []
        (last,) = await fetch_n(sub, 1, limit=ACK_WAIT + 5)
        await last.dead_letter("max_deliver")  # the consumer's retry budget ran out
        assert dead.items == [(e, "max_deliver", REDELIVERIES + 2)]
        assert await transport.backlog(0) == 0
        await transport.publish([other])  # the partition keeps working
        (d,) = await fetch_n(sub, 1)
        assert d.envelope == other
        await sub.ack([d])

    # -- packs: a request's envelopes published at once ------------------------------------
    # A transport may store the envelopes of one publish that share a subject as one broker
    # message (a pack, ``core.packing``): every part a delivery of its own, at the pack's
    # position, the pack settled at the broker once every part is. These checks hold the
    # port's promises whether or not the adapter packs (the memory transport does not), so
    # they say nothing of positions and allow an acked part to come back while its pack is
    # not wholly settled.

    async def test_pack_request_published_at_once_is_delivered_once_each_and_settled_by_acks(
        self, transport: ClosableTransport
    ) -> None:
        sent = [envelope(11, "dev-1", i) for i in range(1, 51)]
        await transport.publish(sent)
        await transport.publish(sent)  # a retry of the request after a lost confirmation
        sub = await transport.open(11, "h1")
        got = await fetch_n(sub, 50)
        assert [d.envelope for d in got] == sent
        assert [d.attempt for d in got] == [1] * 50
        await sub.ack(got)
        await fetch_none(sub, ACK_WAIT * 1.5)
        assert await transport.backlog(11) == 0
        assert await transport.oldest_unacked(11) is None
        await sub.close()
        await fetch_none(await transport.open(11, "h2"), 0.5)

    async def test_pack_fetches_smaller_than_the_request_hand_out_each_message_once(
        self, transport: ClosableTransport
    ) -> None:
        sent = [envelope(11, "dev-1", i) for i in range(1, 51)]
        await transport.publish(sent)
        sub = await transport.open(11, "h1")
        got: list[Delivery] = []
        with anyio.fail_after(LIMIT):
            while len(got) < len(sent):
                batch = await sub.fetch(7, 0.5)
                assert len(batch) <= 7
                got.extend(batch)
        assert [d.envelope for d in got] == sent
        positions = [d.position for d in got]
        assert positions == sorted(positions), "a partition keeps its publish order"
        await sub.ack(got)
        await fetch_none(sub, ACK_WAIT * 1.5)
        assert await transport.backlog(11) == 0

    async def test_pack_acking_only_some_brings_the_others_back_after_ack_wait(
        self, transport: ClosableTransport
    ) -> None:
        if not self.features.redelivery_after_ack_wait:
            not_applicable("adapter has no per-message ack_wait")
        sent = [envelope(11, "dev-1", i) for i in range(1, 51)]
        await transport.publish(sent)
        sub = await transport.open(11, "h1")
        got = await fetch_n(sub, 50)
        await sub.ack(got[::2])
        unacked = {d.envelope for d in got[1::2]}
        back: set[Envelope] = set()
        with anyio.fail_after(ACK_WAIT + LIMIT):
            while not unacked <= back:  # the acked ones may come too
                again = await sub.fetch(50, 0.5)
                assert {d.envelope for d in again} <= set(sent)
                assert all(d.attempt == 2 for d in again if d.envelope in unacked)
                back |= {d.envelope for d in again}
                await sub.ack(again)
        await fetch_none(sub, ACK_WAIT * 1.5)
        assert await transport.backlog(11) == 0

    async def test_pack_acking_only_some_brings_the_others_to_the_next_subscriber(
        self, transport: ClosableTransport
    ) -> None:
        sent = [envelope(11, "dev-1", i) for i in range(1, 51)]
        await transport.publish(sent)
        old = await transport.open(11, "h1")
        got = await fetch_n(old, 50)
        await old.ack(got[:30])
        await old.close()
        new = await transport.open(11, "h2")
        back: list[Delivery] = []
        with anyio.fail_after(ACK_WAIT + LIMIT):
            while not set(sent[30:]) <= {d.envelope for d in back}:  # the acked may come too
                back.extend(await new.fetch(50, 0.5))
        assert {d.envelope for d in back} <= set(sent)
        assert len(back) == len({d.envelope for d in back}), "each once"
        assert all(d.attempt == 1 for d in back), "a close excuses what it gives back"
        await new.ack(back)
        await fetch_none(new, ACK_WAIT * 1.5)
        assert await transport.backlog(11) == 0

    async def test_pack_dead_lettering_one_and_acking_the_rest_stores_it_alone_once(
        self, transport: ClosableTransport, dead: DeadLetterLog
    ) -> None:
        sent = [envelope(11, "dev-1", i) for i in range(1, 51)]
        poison = sent[17]
        await transport.publish(sent)
        sub = await transport.open(11, "h1")
        got = await fetch_n(sub, 50)
        (doomed,) = [d for d in got if d.envelope == poison]
        await doomed.dead_letter("unprocessable")
        await doomed.dead_letter("unprocessable")
        await sub.ack(got)
        assert dead.items == [(poison, "unprocessable", 1)]
        assert transport.dead_letters == 1
        await fetch_none(sub, ACK_WAIT * 1.5)
        assert await transport.backlog(11) == 0
        await sub.close()
        await fetch_none(await transport.open(11, "h2"), 0.5)
        assert dead.items == [(poison, "unprocessable", 1)]

    # -- partitions and subscriptions ----------------------------------------------------

    async def test_partitions_are_isolated_when_several_are_used(
        self, transport: ClosableTransport
    ) -> None:
        p1 = [envelope(1, "a", i) for i in range(1, 4)]
        p2 = [envelope(2, "b", i) for i in range(1, 3)] + [envelope(2, "a", 9)]
        p12 = [envelope(12, "a", 1)]  # "p1" is a prefix of "p12"
        await transport.publish(p1 + p2 + p12)
        sub2 = await transport.open(2, "h2")
        got2 = await fetch_n(sub2, 3)
        await fetch_none(sub2, 0.3)
        sub1 = await transport.open(1, "h1")
        got1 = await fetch_n(sub1, 3)
        await fetch_none(sub1, 0.3)
        assert {d.envelope.message_id for d in got1} == {e.message_id for e in p1}
        assert {d.envelope.message_id for d in got2} == {e.message_id for e in p2}
        assert await transport.backlog(12) == 1

    async def test_next_open_gets_unacked_messages_when_a_subscription_closed(
        self, transport: ClosableTransport
    ) -> None:
        sent = [envelope(4, "a", i) for i in range(1, 4)]
        await publish_each(transport, sent)
        old = await transport.open(4, "h1")
        got = await fetch_n(old, 3)
        await old.ack(got[:1])
        await old.close()
        await old.close()
        with pytest.raises(anyio.ClosedResourceError):
            await old.fetch(1, 0.1)
        new = await transport.open(4, "h2")
        again = await fetch_n(new, 2, limit=ACK_WAIT + 10)
        assert {d.envelope for d in again} == set(sent[1:])
        assert all(d.attempt == 1 for d in again), "a close excuses what it gives back"
        await new.ack(again)
        await fetch_none(new, 0.3)

    async def test_closes_spend_no_attempt_while_a_dropped_subscription_spends_one(
        self, transport: ClosableTransport
    ) -> None:
        """A subscription closed on purpose (a handoff, a lost lease) excuses what it gives
        back: after ``REBALANCES`` closes in a row the message still comes with attempt 1.
        One dropped without a close (its process was killed) excuses nothing."""
        e = envelope(14)
        await transport.publish([e])
        for i in range(REBALANCES):
            sub = await transport.open(14, f"h{i}")
            (d,) = await fetch_n(sub, 1, limit=ACK_WAIT + LIMIT)
            assert (d.envelope, d.attempt) == (e, 1), f"after {i} closes"
            await sub.close()
        crashed = await transport.open(14, "crashed")
        (d,) = await fetch_n(crashed, 1, limit=ACK_WAIT + LIMIT)
        assert (d.envelope, d.attempt) == (e, 1)
        survivor = await transport.open(14, "survivor")  # ``crashed`` is never closed
        (d,) = await fetch_n(survivor, 1, limit=ACK_WAIT + LIMIT)
        assert (d.envelope, d.attempt) == (e, 2)
        await survivor.ack([d])
        assert await transport.backlog(14) == 0
        await survivor.close()

    async def test_a_superseded_subscription_cannot_undo_its_successors_acks(
        self, transport: ClosableTransport
    ) -> None:
        """A handler paused past its handoff wakes up holding deliveries of a partition that
        a newer subscription has since opened and acked: whatever it settles or commits
        then, what the newer one acked stays acked (Kafka: its commit is fenced)."""
        sent = [envelope(13, "a", i) for i in range(1, 7)]
        await transport.publish(sent)
        old = await transport.open(13, "h1")
        held = await fetch_n(old, 3)
        new = await transport.open(13, "h2")
        acked: set[Envelope] = set()
        with anyio.fail_after(ACK_WAIT + LIMIT):  # old's 3 come once they expire
            while len(acked) < len(sent):
                got = await new.fetch(len(sent), 0.5)
                await new.ack(got)
                acked |= {d.envelope for d in got}
        assert acked == set(sent)
        await new.close()
        with contextlib.suppress(FencedError):
            await old.ack(held)
        await old.close()
        assert await transport.backlog(13) == 0
        third = await transport.open(13, "h3")
        await fetch_none(third, ACK_WAIT)

    # -- consumption modes -------------------------------------------------------------

    async def test_each_position_gets_every_message_and_keeps_it_when_positions_differ(
        self, make_transport: TransportFactory, make_transport_at: PositionedFactory
    ) -> None:
        """Broadcast: two handlers' positions each deliver the whole partition, and acking
        at one settles nothing at the other, nor at the group's own position."""
        dead = DeadLetterLog()
        sent = [envelope(5, "a", i) for i in range(1, 6)]
        async with make_transport_at(dead, "ha") as a, make_transport_at(dead, "hb") as b:
            await publish_each(a, sent)
            sub_a = await a.open(5, "ha")
            got_a = await fetch_n(sub_a, 5)
            await sub_a.ack(got_a)
            sub_b = await b.open(5, "hb")
            got_b = await fetch_n(sub_b, 5)
            await fetch_none(sub_b, 0.3)
            await sub_b.ack(got_b[:2])
        assert {d.envelope for d in got_a} == {d.envelope for d in got_b} == set(sent)
        assert sorted(d.position for d in got_a) == sorted(d.position for d in got_b)
        async with make_transport_at(dead, "ha") as a, make_transport_at(dead, "hb") as b:
            await fetch_none(await a.open(5, "ha"), 0.3)  # a restart resumes its position
            again = await fetch_n(await b.open(5, "hb"), 3, limit=ACK_WAIT + LIMIT)
            assert {d.envelope for d in again} == set(sent[2:])
        async with make_transport(dead) as group:
            assert await group.backlog(5) == len(sent)
            await fetch_n(await group.open(5, "h1"), 5)

    async def test_competing_subscriptions_split_a_partition_with_none_lost_or_twice(
        self, make_transport: TransportFactory
    ) -> None:
        """Shared: two subscriptions of one partition (two handlers' transports) each get
        part of its messages; between them every message exactly once while they ack in
        time."""
        if not self.features.competing_subscriptions:
            not_applicable("a partition has one position per group on this transport")
        dead = DeadLetterLog()
        sent = [envelope(6, f"p{i % 3}", i) for i in range(1, 21)]
        async with make_transport(dead) as a, make_transport(dead) as b:
            await a.publish(sent)
            sub_a, sub_b = await a.open(6, "ha"), await b.open(6, "hb")
            got_a = await fetch_n(sub_a, 10)
            got_b = await fetch_n(sub_b, 10)
            await sub_a.ack(got_a)
            await sub_b.ack(got_b)
            await fetch_none(sub_a, 0.3)
            await fetch_none(sub_b, 0.3)
            assert await a.backlog(6) == 0
        ids_a = {d.envelope.message_id for d in got_a}
        ids_b = {d.envelope.message_id for d in got_b}
        assert not ids_a & ids_b
        assert ids_a | ids_b == {e.message_id for e in sent}

    async def test_backlog_counts_stored_unacked_messages(
        self, transport: ClosableTransport
    ) -> None:
        assert await transport.backlog(5) == 0
        await publish_each(transport, [envelope(5, "a", i) for i in range(1, 6)])
        await transport.publish([envelope(5, "z", 1, MessageKind.ANNOUNCE)])
        await transport.publish([envelope(6, "a", 1)])
        assert await transport.backlog(5) == 6  # before anyone opened the partition
        sub = await transport.open(5, "h1")
        assert await transport.backlog(5) == 6
        got = await fetch_n(sub, 6)
        assert await transport.backlog(5) == 6  # delivered but not acked
        await sub.ack(got[:4])
        assert await transport.backlog(5) == 2
        assert await transport.backlog(6) == 1

    async def test_oldest_unacked_is_when_the_first_unacked_message_was_stored(
        self, transport: ClosableTransport
    ) -> None:
        assert await transport.oldest_unacked(9) is None  # nothing stored
        stored: list[tuple[float, float]] = []  # each publish call's wall-clock bracket
        for sequence in (1, 2, 3):
            before = time.time()
            await transport.publish([envelope(9, "a", sequence)])
            stored.append((before, time.time()))
            # Not a wait for an event: the three store times must be told apart.
            await anyio.sleep(STORE_GAP)
        await transport.publish([envelope(10, "a", 1)])

        def stored_during(at: float | None, bracket: tuple[float, float]) -> bool:
            # Kafka keeps record timestamps in whole milliseconds.
            return at is not None and bracket[0] - 0.002 <= at <= bracket[1] + 0.002

        assert stored_during(await transport.oldest_unacked(9), stored[0])  # none opened yet
        sub = await transport.open(9, "h1")
        first, second, third = await fetch_n(sub, 3)
        assert stored_during(await transport.oldest_unacked(9), stored[0])  # delivered only
        await sub.ack([first, third])  # out of order: the second is still unacked
        assert stored_during(await transport.oldest_unacked(9), stored[1])
        await sub.ack([second])
        assert await transport.oldest_unacked(9) is None
        assert await transport.backlog(9) == 0
        assert await transport.oldest_unacked(10) is not None  # its own partition only

    async def test_backlog_reads_of_many_partitions_at_once_answer_each_its_own(
        self, transport: ClosableTransport
    ) -> None:
        """A new leader reads every partition's backlog at once (an adapter may serve
        concurrent reads with one request): each read still answers for its partition."""
        partitions = range(1, 9)
        for p in partitions:  # p - 1 messages; partition 1 stays empty
            await publish_each(transport, [envelope(p, "a", i) for i in range(1, p)])
        sub = await transport.open(4, "h1")
        await sub.ack((await fetch_n(sub, 3))[:1])
        one_by_one = [
            (await transport.backlog(p), await transport.oldest_unacked(p)) for p in partitions
        ]
        at_once: dict[int, tuple[int, float | None]] = {}

        async def read(p: int) -> None:
            at_once[p] = (await transport.backlog(p), await transport.oldest_unacked(p))

        async with anyio.create_task_group() as tg:
            for p in partitions:
                tg.start_soon(read, p)
        assert [at_once[p] for p in partitions] == one_by_one
        assert [lag for lag, _ in one_by_one] == [0, 1, 2, 2, 4, 5, 6, 7]
        assert [at is None for _, at in one_by_one] == [True] + [False] * 7
        await sub.close()

    # -- durability ----------------------------------------------------------------------

    async def test_messages_survive_when_the_server_is_killed_and_restarted(
        self, transport: ClosableTransport, crash_and_restart: Callable[[], Awaitable[None]]
    ) -> None:
        if not self.features.persistent:
            not_applicable("adapter keeps messages in memory")
        sent = [envelope(7, "a", i) for i in range(1, 51)]
        await transport.publish(sent)
        await crash_and_restart()
        sub = await transport.open(7, "h1")
        got = await fetch_n(sub, 50, limit=30)
        assert [d.envelope for d in got] == sent
        await sub.ack(got)
        assert await transport.backlog(7) == 0
