"""The DeadLetterQueue contract, written once and run against every adapter.

An adapter's test module subclasses ``DeadLetterQueueContract`` and supplies:

- ``make_transport`` (in the class or its module): as for ``TransportContract``;
- ``make_queue``: a factory ``() -> async context manager`` returning the dead-letter queue
  of that same transport's dead-letter store.

Letters are made the way production makes them: a subscription's ``dead_letter``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from typing import ClassVar

import anyio
import pytest

from core.dead_letters import UnknownDeadLetterError
from core.messages import Envelope
from core.ports import DeadLetterQueue
from core.retry import DeadLetterReason
from tests.contract._transport import (
    ClosableTransport,
    DeadLetterLog,
    TransportFactory,
    envelope,
    fetch_n,
)

QueueFactory = Callable[[], AbstractAsyncContextManager[DeadLetterQueue]]


class DeadLetterQueueContract:
    """Subclass as ``Test<Adapter>DeadLetterQueue``; provide ``make_transport``/``make_queue``."""

    pytestmark: ClassVar[list[pytest.MarkDecorator]] = [pytest.mark.anyio]

    @pytest.fixture
    async def transport(self, make_transport: TransportFactory) -> AsyncIterator[ClosableTransport]:
        async with make_transport(DeadLetterLog()) as t:
            yield t

    @pytest.fixture
    async def queue(self, make_queue: QueueFactory) -> AsyncIterator[DeadLetterQueue]:
        async with make_queue() as q:
            yield q

    @staticmethod
    async def kill(
        transport: ClosableTransport,
        envelopes: list[Envelope],
        reason: DeadLetterReason = "unprocessable",
    ) -> None:
        """Publish ``envelopes`` (one partition) and dead-letter each as a consumer would."""
        await transport.publish(envelopes)
        sub = await transport.open(envelopes[0].partition, "h1")
        try:
            for delivery in await fetch_n(sub, len(envelopes)):
                await delivery.dead_letter(reason)
        finally:
            await sub.close()

    async def test_lists_nothing_when_nothing_died(self, queue: DeadLetterQueue) -> None:
        assert list(await queue.letters()) == []

    async def test_lists_every_dead_letter_oldest_first_with_its_envelope_and_reason(
        self, transport: ClosableTransport, queue: DeadLetterQueue
    ) -> None:
        dead = [envelope(2, sequence=s) for s in (1, 2, 3)]
        await self.kill(transport, dead, "max_deliver")
        letters = await queue.letters()
        assert [letter.envelope for letter in letters] == dead
        assert {(letter.reason, letter.attempts) for letter in letters} == {("max_deliver", 1)}
        positions = [letter.position for letter in letters]
        assert positions == sorted(set(positions))

    async def test_replay_puts_a_letter_back_under_its_own_id_and_removes_it(
        self, transport: ClosableTransport, queue: DeadLetterQueue
    ) -> None:
        # Within the duplicate window of the original publish, and to the subscription that
        # saw the original: the replay must not pass for a duplicate.
        poison, other = envelope(3, sequence=1), envelope(3, sequence=2)
        await transport.publish([poison, other])
        sub = await transport.open(3, "h1")
        for delivery in await fetch_n(sub, 2):
            await delivery.dead_letter("unprocessable")
        assert await queue.replay([poison.message_id]) == 1
        assert [letter.envelope for letter in await queue.letters()] == [other]
        (back,) = await fetch_n(sub, 1)
        assert back.envelope == poison
        await sub.ack([back])
        assert list(await sub.fetch(5, 1.0)) == [], "replayed more than once"
        await sub.close()

    async def test_pack_one_message_of_a_request_dies_alone_and_is_replayed_alone(
        self, transport: ClosableTransport, queue: DeadLetterQueue
    ) -> None:
        """Envelopes published at once may be stored as one pack (``core.packing``), whose
        parts share a position: dead-lettering two of its messages stores each alone,
        under its own message id, and replay and purge act on one of them only."""
        sent = [envelope(8, "dev-1", s) for s in range(1, 21)]
        poison, other = sent[4], sent[11]
        await transport.publish(sent)
        sub = await transport.open(8, "h1")
        got = await fetch_n(sub, len(sent))
        for delivery in got:
            if delivery.envelope in (poison, other):
                await delivery.dead_letter("unprocessable")
        await sub.ack(got)
        assert [letter.envelope for letter in await queue.letters()] == [poison, other]
        assert await queue.replay([poison.message_id]) == 1
        assert [letter.envelope for letter in await queue.letters()] == [other]
        (back,) = await fetch_n(sub, 1)
        assert back.envelope == poison
        await sub.ack([back])
        assert list(await sub.fetch(5, 1.0)) == [], "replayed more than once, or another part"
        await sub.close()
        assert await queue.purge([other.message_id]) == 1
        assert list(await queue.letters()) == []

    async def test_a_replayed_letter_that_dies_again_is_listed_again(
        self, transport: ClosableTransport, queue: DeadLetterQueue
    ) -> None:
        poison = envelope(4)
        await self.kill(transport, [poison])
        assert await queue.replay(None) == 1
        sub = await transport.open(4, "h2")
        (back,) = await fetch_n(sub, 1)
        await back.dead_letter("unprocessable")
        await sub.close()
        with anyio.fail_after(10):
            (letter,) = await queue.letters()
        assert letter.envelope == poison

    async def test_purge_drops_the_named_letters_and_then_the_rest(
        self, transport: ClosableTransport, queue: DeadLetterQueue
    ) -> None:
        dead = [envelope(5, sequence=s) for s in (1, 2, 3)]
        await self.kill(transport, dead)
        assert await queue.purge([dead[1].message_id]) == 1
        assert [letter.envelope for letter in await queue.letters()] == [dead[0], dead[2]]
        assert await queue.purge(None) == 2
        assert list(await queue.letters()) == []

    async def test_an_unknown_id_changes_nothing(
        self, transport: ClosableTransport, queue: DeadLetterQueue
    ) -> None:
        dead = [envelope(6, sequence=s) for s in (1, 2)]
        await self.kill(transport, dead)
        before = await queue.letters()
        with pytest.raises(UnknownDeadLetterError, match="no-such-id"):
            await queue.replay([dead[0].message_id, "no-such-id"])
        with pytest.raises(UnknownDeadLetterError, match="no-such-id"):
            await queue.purge(["no-such-id"])
        assert await queue.letters() == before
        sub = await transport.open(6, "h2")
        assert list(await sub.fetch(5, 1.0)) == [], "a refused replay sent something"
        await sub.close()

    async def test_a_new_queue_sees_what_an_earlier_one_left(
        self, transport: ClosableTransport, make_queue: QueueFactory
    ) -> None:
        dead = [envelope(7, sequence=s) for s in (1, 2)]
        await self.kill(transport, dead)
        async with make_queue() as first:
            await first.purge([dead[0].message_id])
        async with make_queue() as second:
            assert [letter.envelope for letter in await second.letters()] == [dead[1]]
