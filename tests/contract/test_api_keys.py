"""The ApiKeyStore contract, run against the keys file and the in-memory store; then what
only the file does: another process's change shows at the next read, concurrent writers
lose nothing, a bad file keeps the last good keys, and secrets are never stored."""

from __future__ import annotations

import json
import os
import stat
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from adapters.keys import ApiKeyFile, KeyFileError
from adapters.memory import InMemoryApiKeys
from core.access import ApiKey, issue_key
from core.ports import ApiKeyStore

pytestmark = pytest.mark.anyio


def record(serial: int, projects: tuple[str, ...] | None = None) -> tuple[str, ApiKey]:
    return issue_key(f"{serial:012x}", f"{serial:040d}", projects=projects, created_at=serial)


@pytest.fixture(params=["file", "memory"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[ApiKeyStore]:
    if request.param == "memory":
        yield InMemoryApiKeys()
        return
    async with ApiKeyFile(tmp_path / "keys.json", create=True) as keys:
        yield keys


async def test_added_keys_come_back_as_stored(store: ApiKeyStore) -> None:
    assert await store.keys() == {}
    _, admin = record(1)
    _, scoped = record(2, ("dev-1", "dev-2"))
    await store.add(admin)
    await store.add(scoped)
    assert await store.keys() == {admin.key_id: admin, scoped.key_id: scoped}


async def test_a_taken_id_is_refused_and_changes_nothing(store: ApiKeyStore) -> None:
    _, first = record(1, ("dev-1",))
    await store.add(first)
    with pytest.raises(ValueError, match="taken"):
        await store.add(record(1)[1])
    assert await store.keys() == {first.key_id: first}


async def test_revoke_keeps_the_first_time_and_unknown_ids_are_key_errors(
    store: ApiKeyStore,
) -> None:
    _, key = record(1)
    await store.add(key)
    revoked = await store.revoke(key.key_id, at=10.0)
    assert revoked.revoked_at == 10.0
    assert (await store.revoke(key.key_id, at=20.0)).revoked_at == 10.0
    assert (await store.keys())[key.key_id].revoked_at == 10.0
    with pytest.raises(KeyError):
        await store.revoke("0" * 12, at=1.0)


async def test_a_change_by_another_process_shows_at_the_next_read(tmp_path: Path) -> None:
    path = tmp_path / "keys.json"
    async with (
        ApiKeyFile(path, create=True) as cli,
        ApiKeyFile(path, create=True) as gateway,
    ):
        _, key = record(1)
        await cli.add(key)
        assert key.key_id in await gateway.keys()
        await cli.revoke(key.key_id, at=5.0)
        assert (await gateway.keys())[key.key_id].revoked


async def test_concurrent_writers_lose_no_key(tmp_path: Path) -> None:
    path = tmp_path / "keys.json"

    def add_many(start: int) -> None:
        async def main() -> None:
            async with ApiKeyFile(path, create=True) as keys:
                for serial in range(start, start + 25):
                    await keys.add(record(serial)[1])

        anyio.run(main)

    writers = [threading.Thread(target=add_many, args=(start,)) for start in (1, 101, 201)]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join()
    async with ApiKeyFile(path) as keys:
        assert len(await keys.keys()) == 75


async def test_the_file_holds_hashes_only_and_is_private(tmp_path: Path) -> None:
    path = tmp_path / "keys.json"
    token, key = record(7, ("dev-1",))
    async with ApiKeyFile(path, create=True) as keys:
        await keys.add(key)
    text = path.read_text()
    assert token.split("_", 2)[2] not in text
    assert json.loads(text)["keys"][0]["secret_sha256"] == key.secret_sha256
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


async def test_a_missing_or_malformed_file_fails_at_start_and_later_keeps_the_last_good(
    tmp_path: Path,
) -> None:
    path = tmp_path / "keys.json"
    with pytest.raises(KeyFileError, match="no API keys file"):
        async with ApiKeyFile(path):
            pass
    path.write_text('{"version": 1, "keys": [{"key_id": "nope"}]}')
    with pytest.raises(KeyFileError, match="malformed"):
        async with ApiKeyFile(path):
            pass
    path.unlink()
    async with ApiKeyFile(path, create=True) as keys:
        _, key = record(1)
        await keys.add(key)
        assert key.key_id in await keys.keys()
        path.write_text("not json")
        os.utime(path, ns=(1, 1))  # a different identity, so it is read again
        assert key.key_id in await keys.keys()  # the last good keys, an error logged
