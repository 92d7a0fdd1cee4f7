"""``ApiKeyFile``: API keys in a JSON file, re-read when it changes (see the package doc)."""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import logging
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Self

from adapters._files import replace_file
from core.access import ApiKey
from core.errors import ShoalError

__all__ = ["ApiKeyFile", "KeyFileError"]

log = logging.getLogger("shoal.keys")

_VERSION = 1


class KeyFileError(ShoalError, ValueError):
    """The keys file is missing or not what ``shoal keys`` writes; the message says where."""


def _decode(path: Path, raw: bytes) -> dict[str, ApiKey]:
    try:
        doc = json.loads(raw)
        if not isinstance(doc, dict) or doc.get("version") != _VERSION:
            raise KeyFileError(f"{path}: not a version {_VERSION} shoal keys file")
        keys: dict[str, ApiKey] = {}
        for entry in doc["keys"]:
            projects = entry["projects"]
            key = ApiKey(
                key_id=entry["key_id"],
                secret_sha256=entry["secret_sha256"],
                projects=None if projects is None else frozenset(projects),
                created_at=float(entry["created_at"]),
                label=entry.get("label", ""),
                revoked_at=entry.get("revoked_at"),
                rate=entry.get("rate"),
            )
            keys[key.key_id] = key
    except KeyFileError:
        raise
    except (ValueError, KeyError, TypeError) as exc:
        raise KeyFileError(f"{path}: malformed keys file: {exc!r}") from None
    return keys


def _encode(keys: Mapping[str, ApiKey]) -> bytes:
    entries: list[dict[str, Any]] = []
    for key in sorted(keys.values(), key=lambda k: (k.created_at, k.key_id)):
        entry = dataclasses.asdict(key)
        entry["projects"] = None if key.projects is None else sorted(key.projects)
        entries.append(entry)
    return json.dumps({"version": _VERSION, "keys": entries}, indent=1).encode() + b"\n"


class ApiKeyFile:
    """The keys in ``path``. Every read checks the file's identity (inode, size, mtime: one
    ``stat``, about a microsecond) and reloads it when it changed, so a key created or
    revoked by ``shoal keys`` counts from the next request on every gateway. Writes
    hold an exclusive lock on ``{path}.lock`` and replace the file atomically, so two
    ``shoal keys`` at once lose nothing and a reader never sees half a file.

    ``create=True`` (``shoal keys create``) starts an empty file when there is none; a
    gateway requires the file to exist (``KeyFileError`` on entering otherwise).
    """

    def __init__(self, path: Path, *, create: bool = False) -> None:
        self.path = path
        self._create = create
        self._keys: dict[str, ApiKey] | None = None
        self._identity: tuple[int, int, int] | None = None
        self._complaint = ""  # the last error logged: said once, not on every request

    async def __aenter__(self) -> Self:
        if not self.path.exists() and not self._create:
            raise KeyFileError(
                f"no API keys file at {self.path}: create a key with "
                f"`shoal keys create --file {self.path} ...`"
            )
        await self.keys()
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    async def keys(self) -> Mapping[str, ApiKey]:
        try:
            self._reload()
        except (OSError, KeyFileError) as exc:
            if self._keys is None:
                raise
            if str(exc) != self._complaint:
                self._complaint = str(exc)
                log.error("keeping the last good API keys: %s", exc)
        else:
            self._complaint = ""
        assert self._keys is not None
        return self._keys

    def _reload(self) -> None:
        try:
            stat = self.path.stat()
        except FileNotFoundError:
            if not self._create:
                raise
            self._keys, self._identity = {}, None
            return
        identity = (stat.st_ino, stat.st_size, stat.st_mtime_ns)
        if identity != self._identity or self._keys is None:
            keys = _decode(self.path, self.path.read_bytes())
            if self._keys is not None and keys.keys() != self._keys.keys():
                log.info("API keys reloaded: %d keys", len(keys))
            self._keys, self._identity = keys, identity

    async def add(self, key: ApiKey) -> None:
        with self._editing() as keys:
            if key.key_id in keys:
                raise ValueError(f"API key id {key.key_id} is taken")
            keys[key.key_id] = key

    async def revoke(self, key_id: str, at: float) -> ApiKey:
        with self._editing() as keys:
            key = keys[key_id]
            if not key.revoked:
                key = keys[key_id] = dataclasses.replace(key, revoked_at=at)
        return key

    @contextlib.contextmanager
    def _editing(self) -> Iterator[dict[str, ApiKey]]:
        """The current keys, under the lock; written back (atomically) if no error."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        lock_path = self.path.with_name(self.path.name + ".lock")
        with lock_path.open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            keys = _decode(self.path, self.path.read_bytes()) if self.path.exists() else {}
            yield keys
            replace_file(self.path, _encode(keys), 0o600)
