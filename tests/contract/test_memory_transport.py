"""The Transport contract on ``InMemoryTransport``."""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager

import pytest

from adapters.memory._transport import InMemoryTransport
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
