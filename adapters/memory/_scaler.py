"""``InMemoryScaler``: the Scaler port as a number, for service-level tests."""

from __future__ import annotations

from anyio.lowlevel import checkpoint

from adapters._lifecycle import Lifecycle

__all__ = ["InMemoryScaler"]


class InMemoryScaler(Lifecycle):
    """Holds the replica count; ``scale_to`` sets it at once (as the Deployment's desired
    count does). ``calls`` records every accepted ``scale_to`` target, in order.

    One instance can be shared by several leaders, as they share one Deployment.
    ``async with`` is accepted (and does nothing) so it composes like the other adapters.
    """

    def __init__(self, replicas: int = 0) -> None:
        if replicas < 0:
            raise ValueError(f"replicas must be >= 0, got {replicas}")
        self._replicas = replicas
        self.calls: list[int] = []

    async def replicas(self) -> int:
        await checkpoint()
        return self._replicas

    async def scale_to(self, replicas: int) -> None:
        if replicas < 0:
            raise ValueError(f"replicas must be >= 0, got {replicas}")
        await checkpoint()
        self.calls.append(replicas)
        self._replicas = replicas
