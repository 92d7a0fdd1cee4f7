"""``shoal keys``: create, list and revoke the gateway's API keys.

The keys file is ``--file``, else ``SHOAL_GATEWAY_API_KEYS_FILE``, else the one the gateway of
the running ``shoal up`` reads. ``create`` prints the key itself on stdout (once: only its
hash is stored) and what it may do on stderr, so ``KEY=$(shoal keys create ...)`` works.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, NoReturn, TypeVar

import anyio
import typer
from rich.console import Console
from rich.table import Table

from adapters.keys import ApiKeyFile, KeyFileError
from core.access import ApiKey, issue_key
from services.cli._status import find_stacks, state_file

__all__ = ["keys_app", "new_admin_key"]

EXIT_USAGE = 2

keys_app = typer.Typer(
    help="The gateway's API keys: create (shown once, stored hashed), list, revoke.",
    no_args_is_help=True,
)

T = TypeVar("T")

KeysFile = Annotated[
    Path | None,
    typer.Option(
        "--file",
        help="the keys file (default: $SHOAL_GATEWAY_API_KEYS_FILE, else the running "
        "`shoal up` gateway's)",
        show_default=False,
    ),
]


def _fail(message: str) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(EXIT_USAGE)


def _keys_file(given: Path | None) -> Path:
    if given is not None:
        return given
    from_env = os.environ.get("SHOAL_GATEWAY_API_KEYS_FILE")
    if from_env:
        return Path(from_env)
    for stack in find_stacks(state_file()):
        if stack.api_keys_file:
            return Path(stack.api_keys_file)
    _fail(
        "no keys file: pass --file PATH or set SHOAL_GATEWAY_API_KEYS_FILE "
        "(or start `shoal up`, whose gateway's file is then used)"
    )


def _run(path: Path, action: Callable[[ApiKeyFile], Awaitable[T]], *, create: bool) -> T:
    async def main() -> T:
        async with ApiKeyFile(path, create=create) as store:
            return await action(store)

    try:
        return anyio.run(main)
    except (KeyFileError, OSError) as exc:
        _fail(str(exc))


async def new_admin_key(store: ApiKeyFile, label: str) -> str:
    """Store a key that may write every project; return the token (shown once)."""
    token, record = issue_key(
        secrets.token_hex(6),
        secrets.token_urlsafe(32),
        projects=None,
        created_at=time.time(),
        label=label,
    )
    await store.add(record)
    return token


@keys_app.command()
def create(
    project: Annotated[
        list[str] | None,
        typer.Option("--project", "-p", help="a project the key may write (repeatable)"),
    ] = None,
    admin: Annotated[bool, typer.Option("--admin", help="the key may write every project")] = (
        False
    ),
    label: Annotated[str, typer.Option(help="what the key is for")] = "",
    rate: Annotated[
        float | None,
        typer.Option(min=0.001, help="requests per second (default: the gateway's)"),
    ] = None,
    file: KeysFile = None,
) -> None:
    """Create a key; print it once (stdout)."""
    if admin == bool(project):
        _fail("give --project ID (one or more) or --admin, not both, not neither")
    path = _keys_file(file)
    try:
        token, record = issue_key(
            secrets.token_hex(6),
            secrets.token_urlsafe(32),
            projects=None if admin else project,
            created_at=time.time(),
            label=label,
            rate=rate,
        )
    except ValueError as exc:
        _fail(f"{exc} (no key was created)")
    _run(path, lambda store: store.add(record), create=True)
    scope = "every project" if record.projects is None else ", ".join(sorted(record.projects))
    typer.echo(
        f"key {record.key_id} may write {scope}; it is shown once, stored hashed in {path}",
        err=True,
    )
    typer.echo(token)


def _when(at: float | None) -> str:
    return "" if at is None else datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def _as_json(key: ApiKey) -> dict[str, object]:
    return {
        "key_id": key.key_id,
        "label": key.label,
        "projects": None if key.projects is None else sorted(key.projects),
        "created_at": key.created_at,
        "revoked_at": key.revoked_at,
        "rate": key.rate,
    }


@keys_app.command(name="list")
def list_keys(
    file: KeysFile = None,
    as_json: Annotated[bool, typer.Option("--json", help="one JSON object")] = False,
) -> None:
    """The keys (never their secrets): id, label, projects, created, revoked."""
    path = _keys_file(file)
    keys = sorted(
        _run(path, lambda store: store.keys(), create=False).values(),
        key=lambda k: (k.created_at, k.key_id),
    )
    if as_json:
        typer.echo(json.dumps({"file": str(path), "keys": [_as_json(k) for k in keys]}))
        return
    table = Table("key id", "label", "projects", "rate", "created", "revoked")
    for key in keys:
        projects = "*" if key.projects is None else ", ".join(sorted(key.projects))
        rate = "" if key.rate is None else f"{key.rate:g}/s"
        table.add_row(
            key.key_id, key.label, projects, rate, _when(key.created_at), _when(key.revoked_at)
        )
    Console(width=160).print(table)


@keys_app.command()
def revoke(
    key_id: Annotated[str, typer.Argument(help="the key's id (from `shoal keys list`)")],
    file: KeysFile = None,
) -> None:
    """Revoke a key: gateways refuse it (401) from their next request."""
    path = _keys_file(file)

    async def action(store: ApiKeyFile) -> ApiKey:
        try:
            return await store.revoke(key_id, time.time())
        except KeyError:
            _fail(f"no key {key_id!r} in {path} (nothing was changed)")

    key = _run(path, action, create=False)
    typer.echo(f"key {key.key_id} revoked at {_when(key.revoked_at)}")
