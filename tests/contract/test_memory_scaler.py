"""The Scaler contract on ``InMemoryScaler``."""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager

import pytest

from adapters.memory._scaler import InMemoryScaler
from core.ports import Scaler
from tests.contract._scaler import ScalerContract, ScalerFactory


class TestInMemoryScaler(ScalerContract):
    @pytest.fixture
    def make_scaler(self) -> ScalerFactory:
        def make() -> AbstractAsyncContextManager[Scaler]:
            return InMemoryScaler()

        return make

    async def test_calls_record_every_accepted_target(self) -> None:
        scaler = InMemoryScaler(replicas=2)
        await scaler.scale_to(3)
        with pytest.raises(ValueError, match="replicas must be >= 0"):
            await scaler.scale_to(-2)
        await scaler.scale_to(1)
        assert scaler.calls == [3, 1]
        assert await scaler.replicas() == 1
