"""The Scaler contract, written once and run against every adapter.

An adapter's test module subclasses ``ScalerContract`` (the class name does not start
with ``Test``, so pytest collects it only through subclasses) and supplies a
``make_scaler`` fixture: a factory returning a fresh, unentered scaler (an async context
manager) whose replica count starts at 0.

The port's promise, as the autoscaling loop relies on it: ``scale_to(n)`` for any
``n >= 0`` returns once ``n`` is the count ``replicas()`` reports (the desired count: a
Deployment's spec, a local pool's live children), a repeated target changes nothing, a
negative one raises ``ValueError`` and changes nothing.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from typing import ClassVar

import anyio
import pytest

from core.ports import Scaler

LIMIT = 20.0  # seconds any single check may take


ScalerFactory = Callable[[], AbstractAsyncContextManager[Scaler]]


class ScalerContract:
    """Subclass as ``Test<Adapter>Scaler`` and provide ``make_scaler``."""

    pytestmark: ClassVar[list[pytest.MarkDecorator]] = [pytest.mark.anyio]

    @pytest.fixture
    def make_scaler(self) -> ScalerFactory:
        raise NotImplementedError

    @pytest.fixture
    async def scaler(self, make_scaler: ScalerFactory) -> AsyncIterator[Scaler]:
        async with make_scaler() as scaler:
            yield scaler

    async def test_a_fresh_scaler_reports_zero(self, scaler: Scaler) -> None:
        with anyio.fail_after(LIMIT):
            assert await scaler.replicas() == 0

    async def test_replicas_report_each_target_up_and_down(self, scaler: Scaler) -> None:
        with anyio.fail_after(LIMIT):
            for target in (1, 3, 2, 4, 1, 0):
                await scaler.scale_to(target)
                assert await scaler.replicas() == target, f"after scale_to({target})"

    async def test_one_step_at_a_time_as_the_loop_moves(self, scaler: Scaler) -> None:
        with anyio.fail_after(LIMIT):
            await scaler.scale_to(2)
            for delta in (+1, +1, -1, -1, -1):
                current = await scaler.replicas()
                await scaler.scale_to(current + delta)
                assert await scaler.replicas() == current + delta

    async def test_the_current_count_again_changes_nothing(self, scaler: Scaler) -> None:
        with anyio.fail_after(LIMIT):
            await scaler.scale_to(2)
            await scaler.scale_to(2)
            assert await scaler.replicas() == 2

    async def test_a_negative_count_is_refused_and_changes_nothing(self, scaler: Scaler) -> None:
        with anyio.fail_after(LIMIT):
            await scaler.scale_to(1)
            with pytest.raises(ValueError, match="replicas must be >= 0"):
                await scaler.scale_to(-1)
            assert await scaler.replicas() == 1
