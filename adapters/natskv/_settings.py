"""``NatsKvSettings``: the coordination bucket on NATS JetStream KV (env prefix
``SHOAL_NATS_KV_``); where NATS is and how to log in come from ``NatsSettings``
(``SHOAL_NATS_URL``, credentials, TLS), composed here rather than repeated."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator
from pydantic_settings import SettingsConfigDict

from adapters._nats_settings import NatsSettings, replica_count
from adapters._store_settings import StoreTiming

__all__ = ["NatsKvSettings"]

_NOT_BUCKET = re.compile(r"[^A-Za-z0-9_-]")


class NatsKvSettings(StoreTiming):
    """Bucket and timing settings shared by every NATS KV coordination adapter.

    The bucket (``shoal_{group}`` by default, the group sanitised to the bucket charset)
    is created on first use with per-message TTLs allowed and a marker TTL, so that a key
    whose TTL runs out leaves a ``MaxAge`` marker that watchers see (nats-server >= 2.11).
    Durability is the server's: ``storage`` file (the default) and ``sync_interval:
    always`` on the server (checked when ``SHOAL_NATS_MONITOR_URL`` is set, as for the
    transport).
    """

    model_config = SettingsConfigDict(env_prefix="SHOAL_NATS_KV_", extra="ignore", frozen=True)

    bucket: str | None = Field(
        default=None,
        pattern=r"^[A-Za-z0-9_-]{1,64}$",
        description="the KV bucket; default shoal_{group}",
    )
    storage: Literal["file", "memory"] = Field(
        default="file",
        description="the bucket's storage (durability is the server's: `sync_interval: "
        "always`, checked when `SHOAL_NATS_MONITOR_URL` is set)",
    )
    replicas: Literal[1, 3, 5] = Field(default=1, description="the bucket's replicas")
    history: int = Field(default=1, ge=1, le=64, description="values the bucket keeps per key")
    marker_ttl: float = Field(
        default=86_400.0,
        ge=1,
        description="how long the server's expiry markers stay (watchers see them meanwhile; "
        "long, because a value the marker no longer shadows can come back after an unclean "
        "shutdown of a one-replica server, nats-io/nats-server#8505)",
    )
    url: str | None = Field(
        default=None,
        description="the servers of the bucket when they are not SHOAL_NATS_URL's (the "
        "coordination on a cluster of its own; the same credentials and TLS)",
    )
    nats: NatsSettings = Field(default_factory=NatsSettings)

    @field_validator("replicas", mode="before")
    @classmethod
    def _replicas(cls, value: object) -> object:
        return replica_count(value)

    def connection(self) -> NatsSettings:
        """How to reach the bucket: ``nats`` at ``url`` when that is set."""
        return self.nats if self.url is None else self.nats.model_copy(update={"url": self.url})

    @property
    def bucket_name(self) -> str:
        return self.bucket or "shoal_" + _NOT_BUCKET.sub("_", self.group)
