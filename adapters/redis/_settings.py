"""``RedisSettings``: where Redis is and how long to wait for it (env prefix ``SHOAL_REDIS_``)."""

from __future__ import annotations

from urllib.parse import urlsplit

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

_SCHEMES = ("redis", "rediss", "unix")


class RedisSettings(BaseSettings):
    """Connection and timing settings shared by every Redis adapter.

    ``url`` is a redis-py URL (``redis://[user:password@]host:port/db``, ``rediss://`` for
    TLS, ``unix:///path?db=0``). Every key lives under ``shoal:{group}:``.
    """

    model_config = SettingsConfigDict(env_prefix="SHOAL_REDIS_", extra="ignore", frozen=True)

    url: str = "redis://127.0.0.1:6379/0"
    group: str = Field(default="default", pattern=r"^[A-Za-z0-9_-]{1,64}$")
    call_timeout: float = Field(
        default=5.0, gt=0, description="bound on every network call (seconds)"
    )
    max_renew_interval: float = Field(
        default=5.0, gt=0, description="renew leases every min(ttl/2, this) seconds"
    )
    retry_interval: float = Field(
        default=0.25, gt=0, description="wait before retrying a failed renewal or watch"
    )
    max_retry_interval: float = Field(
        default=2.0, gt=0, description="cap on the watch retry backoff"
    )
    resync_interval: float = Field(
        default=5.0,
        gt=0,
        description="watches re-read the whole state at least this often (safety net for "
        "lost notifications, e.g. expirations while disconnected)",
    )
    events_maxlen: int = Field(
        default=10_000, ge=100, description="approximate cap of the change-event stream"
    )
    close_timeout: float = Field(default=5.0, gt=0, description="bound on leaving an adapter")

    @field_validator("url")
    @classmethod
    def _check_url(cls, value: str) -> str:
        scheme = urlsplit(value).scheme
        if scheme not in _SCHEMES:
            raise ValueError(
                f"SHOAL_REDIS_URL: expected a {'/'.join(_SCHEMES)}:// URL, got {value!r}"
            )
        return value

    @property
    def prefix(self) -> str:
        """The root of this group's keys, with its trailing colon."""
        return f"shoal:{self.group}:"
