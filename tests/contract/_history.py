"""The History contract, written once and run against every adapter.

An adapter's test module subclasses ``HistoryContract`` and supplies:

- ``make_transport`` (in the class or its module): as for ``TransportContract``;
- ``make_history``: a factory ``(transport) -> async context manager`` returning the
  history of that transport's stored messages.

Messages are published in three slices; the window boundaries are the broker's own stored
timestamps (and positions) of the first message of a slice, read back through the port.
The only sleep separates the slices' timestamps (Kafka's are milliseconds).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import ClassVar

import anyio
import pytest

from core.messages import Envelope, MessageKind
from core.ports import History
from core.replay import AtPosition, AtTime, StoredMessage, Window
from tests.contract._transport import (
    LIMIT,
    ClosableTransport,
    DeadLetterLog,
    TransportFactory,
    envelope,
    fetch_n,
    publish_each,
)

HistoryFactory = Callable[[ClosableTransport], AbstractAsyncContextManager[History]]

P = 2  # the partition replayed
OTHER = 3  # a neighbour whose messages must never show
SEPARATION = 0.005  # seconds between slices: apart on a millisecond clock


@dataclass(frozen=True)
class Slices:
    before: list[Envelope]
    middle: list[Envelope]
    after: list[Envelope]
    stored: list[StoredMessage]  # every message of P, as the broker stored it

    def first(self, envelopes: list[Envelope]) -> StoredMessage:
        return next(m for m in self.stored if m.envelope == envelopes[0])


async def read(
    history: History, partition: int, window: Window, project_id: str | None = None
) -> list[StoredMessage]:
    with anyio.fail_after(LIMIT):
        return [m async for m in history.read(partition, window, project_id)]


class HistoryContract:
    """Subclass as ``Test<Adapter>History``; provide ``make_transport``/``make_history``."""

    pytestmark: ClassVar[list[pytest.MarkDecorator]] = [pytest.mark.anyio]

    @pytest.fixture
    async def transport(self, make_transport: TransportFactory) -> AsyncIterator[ClosableTransport]:
        async with make_transport(DeadLetterLog()) as t:
            yield t

    @pytest.fixture
    async def history(
        self, make_history: HistoryFactory, transport: ClosableTransport
    ) -> AsyncIterator[History]:
        async with make_history(transport) as h:
            yield h

    @pytest.fixture
    async def slices(self, transport: ClosableTransport, history: History) -> Slices:
        before = [envelope(P, "projX", s) for s in (1, 2, 3)]
        middle = [
            envelope(P, "projX", 4),
            envelope(P, "projY", 1),
            envelope(P, "projY", 2, kind=MessageKind.ANNOUNCE),
            envelope(P, "projX", 5),
        ]
        after = [envelope(P, "projY", s) for s in (3, 4)]
        await publish_each(transport, [*before, envelope(OTHER, "projX", 1)])
        await anyio.sleep(SEPARATION)
        await publish_each(transport, [middle[0], envelope(OTHER, "projX", 2), *middle[1:]])
        await anyio.sleep(SEPARATION)
        await publish_each(transport, after)
        stored = await read(history, P, Window(AtPosition(0)))
        assert [m.envelope for m in stored] == [*before, *middle, *after]
        slices = Slices(before, middle, after, stored)
        assert stored[len(before) - 1].stored_at < slices.first(middle).stored_at
        assert stored[-len(after) - 1].stored_at < slices.first(after).stored_at
        return slices

    async def test_a_time_window_returns_exactly_its_messages_in_order(
        self, history: History, slices: Slices
    ) -> None:
        start, end = slices.first(slices.middle), slices.first(slices.after)
        got = await read(history, P, Window(AtTime(start.stored_at), AtTime(end.stored_at)))
        assert [m.envelope for m in got] == slices.middle
        assert got == [m for m in slices.stored if m.envelope in slices.middle]

    async def test_a_position_window_returns_exactly_its_messages_in_order(
        self, history: History, slices: Slices
    ) -> None:
        start, end = slices.first(slices.middle), slices.first(slices.after)
        got = await read(history, P, Window(AtPosition(start.position), AtPosition(end.position)))
        assert [m.envelope for m in got] == slices.middle
        positions = [m.position for m in got]
        assert positions == sorted(set(positions))

    async def test_a_project_filter_keeps_that_projects_data_and_announcements(
        self, history: History, slices: Slices
    ) -> None:
        start, end = slices.first(slices.middle), slices.first(slices.after)
        window = Window(AtTime(start.stored_at), AtTime(end.stored_at))
        got = await read(history, P, window, "projY")
        assert [m.envelope for m in got] == [e for e in slices.middle if e.project_id == "projY"]

    async def test_without_an_end_it_reads_to_the_last_message(
        self, history: History, slices: Slices
    ) -> None:
        got = await read(history, P, Window(AtTime(slices.first(slices.middle).stored_at)))
        assert [m.envelope for m in got] == [*slices.middle, *slices.after]

    async def test_an_empty_window_yields_nothing_and_ends(
        self, history: History, slices: Slices
    ) -> None:
        start = slices.first(slices.middle)
        last = slices.stored[-1]
        assert await read(history, P, Window(AtTime(last.stored_at + 3600))) == []
        assert await read(history, P, Window(AtPosition(last.position + 1))) == []
        same = AtPosition(start.position)
        assert await read(history, P, Window(same, same)) == []
        assert await read(history, P, Window(AtTime(0), AtTime(1))) == []
        assert await read(history, 5, Window(AtPosition(0))) == []  # nothing published there

    async def test_acked_messages_remain_replayable(
        self, transport: ClosableTransport, history: History, slices: Slices
    ) -> None:
        sub = await transport.open(P, "h1")
        try:
            deliveries = await fetch_n(sub, len(slices.stored))
            await sub.ack(deliveries)
        finally:
            await sub.close()
        assert await transport.backlog(P) == 0
        assert await read(history, P, Window(AtPosition(0))) == slices.stored

    async def test_a_read_leaves_the_consumers_progress_alone(
        self, transport: ClosableTransport, history: History, slices: Slices
    ) -> None:
        # a backlog counts broker messages: those published together may be one (a pack)
        assert await transport.backlog(P) == len({m.position for m in slices.stored})
        sub = await transport.open(P, "h1")
        try:
            deliveries = await fetch_n(sub, len(slices.stored))
            assert [d.envelope for d in deliveries] == [m.envelope for m in slices.stored]
            await sub.ack(deliveries)
        finally:
            await sub.close()

    async def test_a_negative_partition_is_refused(self, history: History) -> None:
        with pytest.raises(ValueError, match="partition"):
            await read(history, -1, Window(AtPosition(0)))
