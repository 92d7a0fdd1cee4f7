"""``StoreTiming``: the settings every coordination store's dialect carries (its group, and
how long calls, lease renewals, retries and leaving may take), declared once."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings

__all__ = ["StoreTiming"]


class StoreTiming(BaseSettings):
    group: str = Field(
        default="default",
        pattern=r"^[A-Za-z0-9_-]{1,64}$",
        description="the group, for the adapter used alone: the services pass `SHOAL_GROUP`, "
        "which wins",
    )
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
