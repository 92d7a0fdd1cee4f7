"""``shoal dlq``: the dead letters of the configured transport (``SHOAL_TRANSPORT`` and its
``SHOAL_NATS_*`` / ``SHOAL_KAFKA_*`` settings; without them, the broker of the stack
``shoal up`` runs). List them, show one, replay them onto their partitions, or purge them.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from typing import Annotated, Any, NoReturn, TypeVar

import anyio
import typer
from rich.console import Console
from rich.table import Table

from core.dead_letters import DeadLetter, UnknownDeadLetterError
from core.errors import ShoalError
from core.ports import DeadLetterQueue
from services.cli._broker import payload_fields, transport_backends
from services.common.lifecycle import sole_error

__all__ = ["dlq_app", "stored_letters"]

EXIT_FAILED = 1
EXIT_USAGE = 2

dlq_app = typer.Typer(
    help="Dead letters: list, show, replay onto their partitions, purge.",
    no_args_is_help=True,
)

T = TypeVar("T")

Ids = Annotated[list[str] | None, typer.Argument(help="message ids", show_default=False)]
All = Annotated[bool, typer.Option("--all", help="every dead letter")]


def _fail(message: str, code: int) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def _run(action: Callable[[DeadLetterQueue], Awaitable[T]]) -> T:
    """Open the configured transport's dead-letter queue, run ``action``, close it."""
    shoal, backends = transport_backends()

    async def main() -> T:
        async with backends.dead_letter_queue() as queue:
            return await action(queue)

    try:
        return anyio.run(main)
    except BaseException as raised:
        exc = sole_error(raised)
        if isinstance(exc, UnknownDeadLetterError):
            _fail(f"{exc} (nothing was changed)", EXIT_USAGE)
        if isinstance(exc, ShoalError | ConnectionError | TimeoutError | OSError):
            _fail(f"{shoal.transport}: {exc}", EXIT_FAILED)
        raise


def stored_letters() -> Sequence[DeadLetter]:
    """Every dead letter of the configured transport (exits with a clear error when the
    broker cannot be read)."""
    return _run(lambda queue: queue.letters())


def _selection(ids: list[str] | None, every: bool) -> list[str] | None:
    if every and ids:
        _fail("name message ids or --all, not both", EXIT_USAGE)
    if not every and not ids:
        _fail("name the message ids, or --all", EXIT_USAGE)
    return None if every else list(dict.fromkeys(ids or ()))


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="seconds")


def _json(letter: DeadLetter, *, payload: bool) -> dict[str, Any]:
    e = letter.envelope
    document: dict[str, Any] = {
        "message_id": e.message_id,
        "position": letter.position,
        "partition": e.partition,
        "project_id": e.project_id,
        "gateway_id": e.gateway_id,
        "sequence": e.sequence,
        "kind": e.kind.value,
        "received_at": e.received_at,
        "reason": letter.reason,
        "attempts": letter.attempts,
        "dead_at": letter.dead_at,
        "payload_bytes": len(e.payload),
    }
    if payload:
        document.update(payload_fields(e.payload))
    return document


@dlq_app.command("list")
def list_letters(
    as_json: Annotated[bool, typer.Option("--json", help="one JSON object per line")] = False,
) -> None:
    """Every dead letter, oldest first: id, partition, project, reason, attempts, when."""
    letters = stored_letters()
    if as_json:
        for letter in letters:
            typer.echo(json.dumps(_json(letter, payload=False)))
        return
    console = Console(highlight=False, soft_wrap=True)
    if not letters:
        console.print("no dead letters")
        return
    table = Table("message id", "partition", "project", "reason", "attempts", "dead at", "bytes")
    for letter in letters:
        e = letter.envelope
        table.add_row(
            e.message_id,
            str(e.partition),
            e.project_id,
            letter.reason,
            str(letter.attempts),
            _iso(letter.dead_at),
            str(len(e.payload)),
        )
    console.print(table)
    console.print(f"{len(letters)} dead letter{'s' if len(letters) != 1 else ''}")


@dlq_app.command()
def show(
    message_id: Annotated[str, typer.Argument(help="a message id", show_default=False)],
) -> None:
    """Every stored copy of one dead letter, with its payload, as JSON."""
    copies = [letter for letter in stored_letters() if letter.envelope.message_id == message_id]
    if not copies:
        _fail(f"not in the dead-letter store: {message_id}", EXIT_USAGE)
    for letter in copies:
        typer.echo(json.dumps(_json(letter, payload=True), indent=2))


@dlq_app.command()
def replay(ids: Ids = None, every: All = False) -> None:
    """Put dead letters back on their partitions under their own ids, and remove them."""
    chosen = _selection(ids, every)
    count: int = _run(lambda queue: queue.replay(chosen))
    typer.echo(f"replayed {count} message{'s' if count != 1 else ''} onto their partitions")


@dlq_app.command()
def purge(ids: Ids = None, every: All = False) -> None:
    """Drop dead letters for good."""
    chosen = _selection(ids, every)
    count: int = _run(lambda queue: queue.purge(chosen))
    typer.echo(f"purged {count} dead letter{'s' if count != 1 else ''}")
