"""The Transport and History contracts on ``InMemoryTransport``."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager

import pytest

from adapters.memory import InMemoryHistory
from adapters.memory._transport import InMemoryTransport
from core.ports import History
from tests.contract._history import HistoryContract, HistoryFactory
from tests.contract._transport import (
    ACK_WAIT,
    ClosableTransport,
    DeadLetterLog,
    Features,
    TransportContract,
    TransportFactory,
)


class TestInMemoryTransport(TransportContract):
    features = Features(persistent=False)

    @pytest.fixture
    def make_transport(self) -> TransportFactory:
        def make(dead: DeadLetterLog) -> AbstractAsyncContextManager[ClosableTransport]:
            return InMemoryTransport(ack_wait=ACK_WAIT, dead_letter=dead)

        return make

    async def test_reply_registration_is_recorded(self, transport: ClosableTransport) -> None:
        assert isinstance(transport, InMemoryTransport)
        await transport.reply_registration(3, "projA", "h1")
        assert transport.registrations == [(3, "projA", "h1")]


class TestInMemoryHistory(HistoryContract):
    @pytest.fixture
    def make_transport(self) -> TransportFactory:
        def make(dead: DeadLetterLog) -> AbstractAsyncContextManager[ClosableTransport]:
            return InMemoryTransport(ack_wait=ACK_WAIT, dead_letter=dead)

        return make

    @pytest.fixture
    def make_history(self) -> HistoryFactory:
        @contextlib.asynccontextmanager
        async def make(transport: ClosableTransport) -> AsyncIterator[History]:
            assert isinstance(transport, InMemoryTransport)
            yield InMemoryHistory(transport)

        return make
