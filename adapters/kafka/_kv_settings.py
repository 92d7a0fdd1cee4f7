"""``KafkaKvSettings``: the coordination log on Kafka (env prefix ``SHOAL_KAFKA_KV_``);
where Kafka is and how to log in come from ``KafkaSettings`` (``SHOAL_KAFKA_*``), composed
here rather than repeated."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from adapters._store_settings import StoreTiming
from adapters.kafka._settings import KafkaSettings

__all__ = ["KafkaKvSettings"]


class KafkaKvSettings(StoreTiming):
    """The log ``shoal.{group}.kv`` and how it is kept (``adapters.kafka._kv``)."""

    model_config = SettingsConfigDict(env_prefix="SHOAL_KAFKA_KV_", extra="ignore", frozen=True)

    compact_records: int = Field(
        default=10_000,
        ge=2,
        description="after this many records the log is snapshotted and what precedes the "
        "snapshot deleted",
    )
    tick_interval: float = Field(
        default=0.25,
        gt=0,
        description="how often an open store checks whether the log's time must be moved "
        "past a lease deadline (an expired lease ends within about this much of it)",
    )
    kafka: KafkaSettings = Field(default_factory=KafkaSettings)

    def connection(self) -> KafkaSettings:
        """How to reach the log: ``kafka``, each call bounded by ``call_timeout``."""
        return self.kafka.model_copy(update={"request_timeout": self.call_timeout})

    @property
    def topic(self) -> str:
        return f"shoal.{self.group}.kv"
