"""``EtcdSettings``: where etcd is and how long to wait for it (env prefix ``SHOAL_ETCD_``)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict


class EtcdSettings(BaseSettings):
    """Connection and timing settings shared by every etcd adapter.

    ``endpoints`` accepts ``host:port`` strings; from the environment, a comma-separated
    list (``SHOAL_ETCD_ENDPOINTS=10.0.0.1:2379,10.0.0.2:2379``). Every key lives under
    ``/shoal/{group}``.
    """

    model_config = SettingsConfigDict(env_prefix="SHOAL_ETCD_", extra="ignore", frozen=True)

    endpoints: Annotated[tuple[str, ...], NoDecode] = ("127.0.0.1:2379",)
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
    close_timeout: float = Field(default=5.0, gt=0, description="bound on leaving an adapter")

    @field_validator("endpoints", mode="before")
    @classmethod
    def _split_endpoints(cls, value: object) -> object:
        if isinstance(value, str):
            value = tuple(part.strip() for part in value.split(",") if part.strip())
        if isinstance(value, list | tuple) and not value:
            raise ValueError("SHOAL_ETCD_ENDPOINTS: at least one host:port is needed")
        return value

    @property
    def prefix(self) -> str:
        """The root of this group's keys, without a trailing slash."""
        return f"/shoal/{self.group}"
