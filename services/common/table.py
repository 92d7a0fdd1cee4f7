"""``LandingTable``: a writer's (or reader's) view of the landed table (``core.table``)
over a ``LandingLog``: catch up with the log, and commit with the log's exclusive create.

Handlers land through it, ``shoal analytics compact`` swaps files through it, and every
reader of the landing zone lists the table's files through it.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import anyio

from adapters.s3 import S3Settings
from core.errors import CommitRefusedError
from core.ports import LandingLog
from core.table import Commit, LandedFile, LogKey, TableState, checkpoint_due
from services.common.landing_zone import landing_log_at
from services.common.logs import fields

__all__ = ["LandingTable", "committed_state", "read_table"]

log = logging.getLogger("shoal.table")


class LandingTable:
    """Not safe for concurrent use by several tasks: one per writer."""

    def __init__(
        self, landing_log: LandingLog, writer: str, clock: Callable[[], float] = time.time
    ) -> None:
        self._log = landing_log
        self._writer = writer
        self._clock = clock
        self._state = TableState()

    @property
    def state(self) -> TableState:
        """The state as of the last ``refresh`` or commit."""
        return self._state

    async def refresh(self) -> TableState:
        """Catch up with every commit made since the last look: a fresh view starts from
        the newest checkpoint, and so does a view whose next commits were removed (after
        a checkpoint covering them)."""
        if self._state.version == 0:
            await self._from_checkpoint()
        commits = await self._log.commits(self._state.version)
        if not commits and await self._from_checkpoint():
            commits = await self._log.commits(self._state.version)
        self._state = self._state.replay(commits)
        return self._state

    async def _from_checkpoint(self) -> bool:
        checkpoint = await self._log.checkpoint()
        if checkpoint is None or checkpoint.version <= self._state.version:
            return False
        self._state = checkpoint
        return True

    async def commit(
        self,
        *,
        added: Sequence[LandedFile] = (),
        removed: Sequence[str] = (),
        positions: Mapping[LogKey, tuple[int, ...]] | None = None,
        floors: Mapping[LogKey, int] | None = None,
    ) -> bool:
        """Commit at the next free version. False, and nothing committed, when the commit
        no longer follows from the table (another writer settled some of ``positions``,
        or took away one of ``removed``): ``state`` then shows why, and the caller
        re-plans. Raises what the log raises when it could not confirm (then the commit
        may exist: the next ``refresh`` shows it, and the caller's re-plan finds its
        positions settled)."""
        commit_id = uuid.uuid4().hex
        while True:
            commit = Commit(
                version=self._state.version + 1,
                commit_id=commit_id,
                writer=self._writer,
                committed_at=self._clock(),
                added=tuple(added),
                removed=tuple(removed),
                positions=dict(positions or {}),
                floors=dict(floors or {}),
            )
            try:
                after = self._state.apply(commit)
            except CommitRefusedError as refused:
                log.info(
                    "commit re-planned: another writer got there first",
                    extra=fields(version=commit.version, why=str(refused)),
                )
                return False
            if await self._log.append(commit):
                self._state = after
                if checkpoint_due(after.version):
                    await self._save_checkpoint(after)
                return True
            await self.refresh()  # lost the race for this version: look and try again

    async def _save_checkpoint(self, state: TableState) -> None:
        try:
            await self._log.save_checkpoint(state)
        except OSError as exc:  # the log still has every commit: readers just apply more
            log.warning(
                "checkpoint not saved", extra=fields(version=state.version, error=repr(exc))
            )


# --- reading the table ------------------------------------------------------------------


async def committed_state(root: Path | str, s3: S3Settings | None = None) -> TableState:
    """The landing zone's table at ``root`` (a directory or ``s3://bucket/prefix``) as its
    log (``root/_shoal/log``) says now: an empty table (version 0) when nothing was
    committed, or there is no log.

    Its ``files`` are the data: read ``root / path`` for each ``path`` in it, never a glob of
    the folder, which also holds files no commit names (a crashed writer's, a racing
    compactor's) and files compacted away, kept for a while for readers still on them.
    """
    return await LandingTable(landing_log_at(root, s3), writer="reader").refresh()


def read_table(root: Path | str, s3: S3Settings | None = None) -> TableState:
    """``committed_state`` for synchronous code. It runs an event loop of its own, so call it
    where none runs (from async code: ``await committed_state(root)``, or this function
    through ``anyio.to_thread.run_sync``). Raises ``OSError`` when the log is unreadable,
    ``ValueError`` for a malformed log entry, ``CommitRefusedError`` for a log whose
    commits do not follow from each other."""
    return anyio.run(committed_state, root, s3)
