"""``shoal replay``: a partition's (or a project's) stored messages in a window, read again
from the transport's broker (``core.replay``, the ``History`` port) and written as JSON
lines to stdout or to a file. The broker is the one ``shoal dlq`` reads. Nothing is acked
or republished: the output is the replay consumer.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, NoReturn

import anyio
import typer

from core.errors import ShoalError
from core.messages import is_valid_project_id
from core.partitioning import partition_for
from core.replay import BadWindowError, StoredMessage, Window, window_of
from services.cli._broker import payload_fields, transport_backends
from services.common.backends import Backends
from services.common.lifecycle import sole_error

__all__ = ["replay"]

EXIT_FAILED = 1
EXIT_USAGE = 2


def _fail(message: str, code: int) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="microseconds")


def _line(message: StoredMessage) -> str:
    e = message.envelope
    document: dict[str, Any] = {
        "id": e.message_id,
        "project": e.project_id,
        "partition": e.partition,
        "position": message.position,
        "timestamp": _iso(message.stored_at),
        "kind": e.kind.value,
        "gateway": e.gateway_id,
        "gateway_sequence": e.sequence,
        "received_at": e.received_at,
        **payload_fields(e.payload),
    }
    return json.dumps(document, ensure_ascii=False)


@dataclass
class _Tally:
    count: int = 0
    first: StoredMessage | None = None
    last: StoredMessage | None = None

    def add(self, message: StoredMessage) -> None:
        self.count += 1
        self.first = self.first or message
        self.last = message

    def summary(self, partition: int, project: str | None) -> dict[str, Any]:
        document: dict[str, Any] = {"count": self.count, "partition": partition}
        if project is not None:
            document["project"] = project
        if self.first is not None and self.last is not None:
            document["positions"] = [self.first.position, self.last.position]
            document["timestamps"] = [_iso(self.first.stored_at), _iso(self.last.stored_at)]
        return document


def _say(summary: dict[str, Any], as_json: bool) -> None:
    if as_json:
        typer.echo(json.dumps(summary), err=True)
        return
    of = (
        f"project {summary['project']} (partition {summary['partition']})"
        if "project" in summary
        else f"partition {summary['partition']}"
    )
    count = summary["count"]
    text = f"replayed {count} message{'s' if count != 1 else ''} of {of}"
    if count:
        (a, b), (t, u) = summary["positions"], summary["timestamps"]
        text += f": positions {a}..{b}, stored {t} .. {u}"
    typer.echo(text, err=True)


def _target(partition: int | None, project: str | None, partitions: int) -> int:
    if project is not None:
        if not is_valid_project_id(project):
            _fail(f"{project!r} is not a project id ([A-Za-z0-9_-], 1 to 64)", EXIT_USAGE)
        return partition_for(project, partitions)
    assert partition is not None
    if not 0 <= partition < partitions:
        _fail(
            f"partition {partition} does not exist: 0..{partitions - 1} (SHOAL_PARTITIONS)",
            EXIT_USAGE,
        )
    return partition


def _temporary(target: Path) -> Path:
    if not target.parent.is_dir():
        _fail(f"--to-file {target}: {target.parent} is not a directory", EXIT_USAGE)
    if target.is_dir():
        _fail(f"--to-file {target} is a directory", EXIT_USAGE)
    return target.parent / f".{target.name}.{os.getpid()}.tmp"


def _read(
    backends: Backends,
    partition: int,
    window: Window,
    project: str | None,
    write: Callable[[str], object],
) -> _Tally:
    tally = _Tally()

    async def main() -> None:
        async with backends.history() as history:
            async for message in history.read(partition, window, project):
                write(_line(message) + "\n")
                tally.add(message)

    anyio.run(main)
    return tally


def replay(
    *,
    start: Annotated[
        str,
        typer.Option(
            "--from",
            help="a position (integer: NATS stream sequence, Kafka offset), a time before "
            "now (-30s, -10m, -2h, -1d) or an ISO-8601 time (UTC unless it says)",
            show_default=False,
        ),
    ],
    partition: Annotated[
        int | None, typer.Option("--partition", help="the partition to replay", show_default=False)
    ] = None,
    project: Annotated[
        str | None,
        typer.Option("--project", help="only this project, on its partition", show_default=False),
    ] = None,
    end: Annotated[
        str | None,
        typer.Option(
            "--to",
            help="the end, excluded (same forms); default: the last message stored now",
            show_default=False,
        ),
    ] = None,
    to_file: Annotated[
        Path | None,
        typer.Option(
            "--to-file",
            help="write the lines to this file (whole or not at all)",
            show_default=False,
        ),
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="the summary on stderr as one JSON object")
    ] = False,
) -> None:
    """Read a partition's stored messages in a window again, as JSON lines (id, project,
    partition, position, broker timestamp, payload), to stdout or a file; nothing is acked
    or republished. A message is in the window when its broker timestamp (or position) is
    at or after --from and before --to."""
    if (partition is None) == (project is None):
        _fail("name --partition or --project, exactly one", EXIT_USAGE)
    shoal, backends = transport_backends()
    target = _target(partition, project, shoal.partitions)
    try:
        window = window_of(start, end, now=time.time())
    except BadWindowError as exc:
        _fail(str(exc), EXIT_USAGE)
    temporary = _temporary(to_file) if to_file is not None else None
    try:
        if temporary is None:
            tally = _read(
                backends, target, window, project, lambda text: typer.echo(text, nl=False)
            )
        else:
            assert to_file is not None
            with temporary.open("w", encoding="utf-8") as out:
                tally = _read(backends, target, window, project, out.write)
                out.flush()
                os.fsync(out.fileno())
            temporary.replace(to_file)
    except BaseException as raised:
        if temporary is not None:
            with contextlib.suppress(FileNotFoundError):
                temporary.unlink()
        if isinstance(sole_error(raised), BrokenPipeError):
            _reader_left()
        _explain(sole_error(raised), shoal.transport)
        raise
    _say(tally.summary(target, project), as_json)


def _reader_left() -> NoReturn:
    """The reader of stdout went away (``| head``): stop quietly, as Unix tools do. Python
    would try to flush the closed pipe again at exit, so stdout goes to /dev/null."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    raise typer.Exit(0)


def _explain(exc: BaseException, transport: str) -> None:
    """Exit with one line for an error the operator can act on; return for the others."""
    if isinstance(exc, ValueError) and not isinstance(exc, ShoalError):
        _fail(f"{transport}: {exc}", EXIT_USAGE)
    if isinstance(exc, ShoalError | ConnectionError | TimeoutError | OSError):
        _fail(f"{transport}: {exc}", EXIT_FAILED)
