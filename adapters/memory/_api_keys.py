"""``InMemoryApiKeys``: the ApiKeyStore port as a dict (service tests)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from core.access import ApiKey

__all__ = ["InMemoryApiKeys"]


class InMemoryApiKeys:
    def __init__(self) -> None:
        self._keys: dict[str, ApiKey] = {}

    async def keys(self) -> Mapping[str, ApiKey]:
        return dict(self._keys)

    async def add(self, key: ApiKey) -> None:
        if key.key_id in self._keys:
            raise ValueError(f"API key id {key.key_id} is taken")
        self._keys[key.key_id] = key

    async def revoke(self, key_id: str, at: float) -> ApiKey:
        key = self._keys[key_id]
        if not key.revoked:
            key = self._keys[key_id] = dataclasses.replace(key, revoked_at=at)
        return key
