"""``InMemoryLandingLog``: the LandingLog port in one process (a dict of commits)."""

from __future__ import annotations

from collections.abc import Sequence

import anyio.lowlevel

from adapters._lifecycle import Lifecycle
from core.table import Commit, TableState

__all__ = ["InMemoryLandingLog"]


class InMemoryLandingLog(Lifecycle):
    """Several ``LandingTable``s may share one (several writers of one landing zone)."""

    def __init__(self) -> None:
        self._commits: dict[int, Commit] = {}
        self._checkpoints: dict[int, TableState] = {}

    async def commits(self, after: int) -> Sequence[Commit]:
        await anyio.lowlevel.checkpoint()
        found: list[Commit] = []
        while (commit := self._commits.get(after + len(found) + 1)) is not None:
            found.append(commit)
        return found

    async def append(self, commit: Commit) -> bool:
        await anyio.lowlevel.checkpoint()
        if commit.version in self._commits:
            return False
        self._commits[commit.version] = commit
        return True

    async def checkpoint(self) -> TableState | None:
        await anyio.lowlevel.checkpoint()
        return self._checkpoints[max(self._checkpoints)] if self._checkpoints else None

    async def save_checkpoint(self, state: TableState) -> None:
        await anyio.lowlevel.checkpoint()
        self._checkpoints[state.version] = state
