"""``DeltaTableUpkeep``: the TableUpkeep port on a Delta Lake table (delta-rs), every call
in a child process (``adapters.delta._maintenance``)."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import anyio
from anyio.abc import ByteReceiveStream

from core.ports import TableHealth
from core.table import DayFiles

__all__ = ["DeltaTableUpkeep"]

_ERROR_CHARS = 500  # of a failed call's stderr, its start
# A held compaction: every HOLD_EVERY seconds the child is told to go on for half of what
# ``held()`` guarantees; the other half covers a renewal that arrives late.
HOLD_EVERY = 0.1


class DeltaTableUpkeep:
    """Each call runs ``python -m adapters.delta._maintenance`` on the newest version of
    the table at ``uri`` (none holds a snapshot between calls), so this process never
    imports delta-rs or pyarrow and gets back what a call took when it ends (see that
    module). A compaction is one commit: a cancelled caller waits for it to end, and one
    given ``held`` ends without committing once ``held()`` says 0. A call that
    fails raises ``OSError`` with the child's error."""

    def __init__(self, uri: str, storage_options: Mapping[str, str] | None = None) -> None:
        self.uri = uri
        self._options = dict(storage_options) if storage_options else None

    async def exists(self) -> bool:
        return bool((await self._call("exists"))["exists"])

    async def health(self, small_file_bytes: int) -> TableHealth:
        found = await self._call("health", small_file_bytes=small_file_bytes)
        return TableHealth(
            version=int(found["version"]),
            files=int(found["files"]),
            bytes=int(found["bytes"]),
            rows=int(found["rows"]),
            log_files=int(found["log_files"]),
            log_bytes=int(found["log_bytes"]),
            days=tuple(DayFiles(str(d), int(n), int(s)) for d, n, s in found["days"]),
        )

    async def compact(
        self,
        days: Sequence[str],
        target_bytes: int,
        *,
        held: Callable[[], float] | None = None,
    ) -> tuple[int, int]:
        if not days:
            return 0, 0
        with anyio.CancelScope(shield=True):  # a rewrite is one commit: let it finish
            counts = await self._call(
                "compact", held=held, days=list(days), target_bytes=target_bytes
            )
        return int(counts["removed"]), int(counts["added"])

    async def checkpoint(self) -> int:
        return int((await self._call("checkpoint"))["removed"])

    async def vacuum(self, retention_hours: float, *, dry_run: bool = False) -> list[str]:
        found = await self._call("vacuum", retention_hours=retention_hours, dry_run=dry_run)
        return [str(f) for f in found["files"]]

    async def _call(
        self, op: str, held: Callable[[], float] | None = None, **arguments: Any
    ) -> dict[str, Any]:
        request = {
            "op": op,
            "uri": self.uri,
            "storage_options": self._options,  # on stdin: it holds the store's secret
            **arguments,
        }
        command = [sys.executable, "-m", "adapters.delta._maintenance"]
        if held is None:
            done = await anyio.run_process(
                command, input=json.dumps(request).encode() + b"\n", check=False
            )
            returncode, stdout, stderr = done.returncode, done.stdout, done.stderr
        else:
            returncode, stdout, stderr = await _run_held(command, request, held)
        if returncode != 0:
            error = " ".join(stderr.decode(errors="replace").split()) or "no output"
            raise OSError(f"Delta table: {op} failed (exit {returncode}): {error[:_ERROR_CHARS]}")
        answer: dict[str, Any] = json.loads(stdout)
        return answer


async def _run_held(
    command: list[str], request: Mapping[str, Any], held: Callable[[], float]
) -> tuple[int, bytes, bytes]:
    """Run the child with ``request``, holding it (a line with the seconds it may go on)
    every ``HOLD_EVERY`` seconds while ``held()`` guarantees any time: its exit status,
    stdout and stderr. ``OSError`` without a child when not held now."""
    guaranteed = held()
    if guaranteed <= 0:
        raise OSError(f"Delta table: {request['op']} not started: its holder's authority ends")
    out, err = bytearray(), bytearray()

    async def drain(stream: ByteReceiveStream | None, into: bytearray) -> None:
        if stream is not None:
            async for chunk in stream:
                into += chunk

    async with await anyio.open_process(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    ) as process:
        assert process.stdin is not None
        stdin = process.stdin

        async def renew() -> None:
            first = dict(request) | {"hold": guaranteed / 2}
            await stdin.send(json.dumps(first).encode() + b"\n")
            while True:
                await anyio.sleep(HOLD_EVERY)  # a heartbeat: nothing to wait for but time
                left = held()
                if left <= 0:
                    return  # the child ends within its last hold, before the authority does
                with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
                    await stdin.send(f"{left / 2:.3f}\n".encode())

        async with anyio.create_task_group() as readers:
            readers.start_soon(drain, process.stdout, out)
            readers.start_soon(drain, process.stderr, err)
            async with anyio.create_task_group() as renewing:
                renewing.start_soon(renew)
                returncode = await process.wait()
                renewing.cancel_scope.cancel()
    return returncode, bytes(out), bytes(err)
