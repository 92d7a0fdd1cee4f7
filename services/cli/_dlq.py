"""``shoal dlq``: the dead letters of the configured transport (``SHOAL_TRANSPORT`` and its
``SHOAL_NATS_*`` / ``SHOAL_KAFKA_*`` settings; without them, the broker of the stack
``shoal up`` runs). List them, show one, replay them onto their partitions, or purge them.

With ``SHOAL_CLUSTERS`` (several datacenters) each cluster keeps the dead letters of the
messages read from it: every command then reads every cluster's store, names the cluster
of each letter, and acts on each letter in its own cluster (``core.dead_letters.
split_by_store``). A cluster that does not answer stops the command before it changes
anything.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any, NoReturn, TypeVar

import anyio
import typer
from rich.console import Console
from rich.table import Table

from core.dead_letters import DeadLetter, UnknownDeadLetterError, split_by_store
from core.errors import ShoalError
from core.ports import DeadLetterQueue
from services.cli._broker import payload_fields, transport_backends
from services.common.backends import datacenter_backends
from services.common.lifecycle import sole_error
from services.common.settings import RoutingSettings, ShoalSettings, load_settings

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


@dataclass(frozen=True, slots=True)
class StoredLetter:
    """A dead letter and the cluster whose store holds it (None: the one transport)."""

    cluster: str | None
    letter: DeadLetter


class _ClusterError(Exception):
    """A cluster's store did not answer: the message names the cluster."""

    def __init__(self, cluster: str, error: BaseException) -> None:
        super().__init__(f"cluster {cluster}: {error}")


async def _enter_queues(
    stack: AsyncExitStack, shoal: ShoalSettings, backends: Any
) -> dict[str | None, DeadLetterQueue]:
    """The dead-letter queue of each cluster of ``SHOAL_CLUSTERS``, or of the transport."""
    clusters = load_settings(RoutingSettings).cluster_map
    if clusters is None:
        return {None: await stack.enter_async_context(backends.dead_letter_queue())}
    try:
        kinds = datacenter_backends(shoal.transport)
    except ValueError as exc:
        raise ShoalError(f"SHOAL_CLUSTERS: {exc}") from None
    base = load_settings(kinds.settings)
    queues: dict[str | None, DeadLetterQueue] = {}
    for name in clusters.names:
        queue = kinds.dead_letter_queue(base.for_cluster(name, clusters.addresses(name)))
        try:
            queues[name] = await stack.enter_async_context(queue)
        except (ShoalError, ConnectionError, TimeoutError, OSError) as exc:
            raise _ClusterError(name, exc) from exc
    return queues


def _run(action: Callable[[Mapping[str | None, DeadLetterQueue]], Awaitable[T]]) -> T:
    """Open the dead-letter queue of the configured transport (of every cluster, with
    ``SHOAL_CLUSTERS``), run ``action``, close them."""
    shoal, backends = transport_backends()

    async def main() -> T:
        async with AsyncExitStack() as stack:
            return await action(await _enter_queues(stack, shoal, backends))

    try:
        return anyio.run(main)
    except BaseException as raised:
        exc = sole_error(raised)
        if isinstance(exc, UnknownDeadLetterError):
            _fail(f"{exc} (nothing was changed)", EXIT_USAGE)
        if isinstance(exc, ShoalError | ConnectionError | TimeoutError | OSError | _ClusterError):
            _fail(f"{shoal.transport}: {exc}", EXIT_FAILED)
        raise


async def _letters_of(queues: Mapping[str | None, DeadLetterQueue]) -> list[StoredLetter]:
    stored: list[StoredLetter] = []
    for cluster, queue in queues.items():
        try:
            letters = await queue.letters()
        except (ShoalError, ConnectionError, TimeoutError, OSError) as exc:
            if cluster is None:
                raise
            raise _ClusterError(cluster, exc) from exc
        stored.extend(StoredLetter(cluster, letter) for letter in letters)
    if len(queues) > 1:  # each store's letters come oldest first; merge them by age
        stored.sort(key=lambda s: s.letter.dead_at)
    return stored


def stored_letters() -> Sequence[StoredLetter]:
    """Every dead letter of the configured transport, of every cluster with
    ``SHOAL_CLUSTERS`` (exits with a clear error when a store cannot be read)."""
    return _run(_letters_of)


Settle = Callable[[DeadLetterQueue, list[str] | None], Awaitable[int]]


def _settle_each(ids: list[str] | None, settle: Settle) -> dict[str | None, int]:
    """``settle`` the chosen letters in each store that holds some of them; every store is
    read first, so an unknown id, or a store that does not answer, changes nothing."""

    async def action(queues: Mapping[str | None, DeadLetterQueue]) -> dict[str | None, int]:
        if len(queues) == 1:
            ((cluster, queue),) = queues.items()
            return {cluster: await settle(queue, ids)}
        held: dict[str, set[str]] = {str(cluster): set() for cluster in queues}
        for stored in await _letters_of(queues):
            held[str(stored.cluster)].add(stored.letter.envelope.message_id)
        split = split_by_store(held, ids)
        return {cluster: await settle(queues[cluster], chosen) for cluster, chosen in split.items()}

    return _run(action)


def _counted(counts: Mapping[str | None, int]) -> tuple[int, str]:
    """The total, and `` (east 2, west 1)`` when there are clusters."""
    total = sum(counts.values())
    named = [f"{cluster} {n}" for cluster, n in sorted(counts.items()) if cluster is not None]
    return total, f" ({', '.join(named)})" if named else ""


def _selection(ids: list[str] | None, every: bool) -> list[str] | None:
    if every and ids:
        _fail("name message ids or --all, not both", EXIT_USAGE)
    if not every and not ids:
        _fail("name the message ids, or --all", EXIT_USAGE)
    return None if every else list(dict.fromkeys(ids or ()))


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="seconds")


def _json(stored: StoredLetter, *, payload: bool) -> dict[str, Any]:
    letter = stored.letter
    e = letter.envelope
    document: dict[str, Any] = {} if stored.cluster is None else {"cluster": stored.cluster}
    document.update(
        {
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
    )
    if payload:
        document.update(payload_fields(e.payload))
    return document


@dlq_app.command("list")
def list_letters(
    as_json: Annotated[bool, typer.Option("--json", help="one JSON object per line")] = False,
) -> None:
    """Every dead letter, oldest first: id, partition, project, reason, attempts, when (and
    the cluster, with SHOAL_CLUSTERS)."""
    letters = stored_letters()
    if as_json:
        for stored in letters:
            typer.echo(json.dumps(_json(stored, payload=False)))
        return
    console = Console(highlight=False, soft_wrap=True)
    if not letters:
        console.print("no dead letters")
        return
    clustered = any(stored.cluster is not None for stored in letters)
    columns = ["message id", "partition", "project", "reason", "attempts", "dead at", "bytes"]
    table = Table(*(["cluster", *columns] if clustered else columns))
    for stored in letters:
        letter, e = stored.letter, stored.letter.envelope
        cells = [
            e.message_id,
            str(e.partition),
            e.project_id,
            letter.reason,
            str(letter.attempts),
            _iso(letter.dead_at),
            str(len(e.payload)),
        ]
        table.add_row(*([str(stored.cluster), *cells] if clustered else cells))
    console.print(table)
    console.print(f"{len(letters)} dead letter{'s' if len(letters) != 1 else ''}")


@dlq_app.command()
def show(
    message_id: Annotated[str, typer.Argument(help="a message id", show_default=False)],
) -> None:
    """Every stored copy of one dead letter, with its payload, as JSON."""
    copies = [s for s in stored_letters() if s.letter.envelope.message_id == message_id]
    if not copies:
        _fail(f"not in the dead-letter store: {message_id}", EXIT_USAGE)
    for stored in copies:
        typer.echo(json.dumps(_json(stored, payload=True), indent=2))


@dlq_app.command()
def replay(ids: Ids = None, every: All = False) -> None:
    """Put dead letters back on their partitions (in their own cluster) under their own
    ids, and remove them."""
    chosen = _selection(ids, every)
    count, by_cluster = _counted(_settle_each(chosen, lambda queue, ids: queue.replay(ids)))
    typer.echo(
        f"replayed {count} message{'s' if count != 1 else ''} onto their partitions{by_cluster}"
    )


@dlq_app.command()
def purge(ids: Ids = None, every: All = False) -> None:
    """Drop dead letters for good."""
    chosen = _selection(ids, every)
    count, by_cluster = _counted(_settle_each(chosen, lambda queue, ids: queue.purge(ids)))
    typer.echo(f"purged {count} dead letter{'s' if count != 1 else ''}{by_cluster}")
