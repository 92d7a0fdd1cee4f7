"""``KafkaSettings``: everything the Kafka adapters read (env prefix ``SHOAL_KAFKA_``).

Shared by the transport and the Kafka coordination store (``KafkaKvSettings`` composes
it). Names:

- ``topic`` (``shoal.data``): the data topic, ``partitions`` partitions (one per shoal
  partition, same number as on NATS), created on first use with ``replication_factor``;
- ``dead_letter_topic`` (``shoal.dlq``) and ``registration_topic`` (``shoal.reg``);
- ``offsets_group_id`` (``shoal.{group}``, a broadcast handler's own position
  ``shoal.{group}.handler.{position}``): the consumer group under which the transport
  commits offsets, in transactions of one transactional producer per partition
  (``transactional.id`` ``{offsets_group_id}:{topic}:{partition}``: the fence against a
  superseded subscriber). It never joins that group: it ``assign()``s partitions.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, Self

from pydantic import AliasChoices, Field, SecretStr, field_validator, model_validator
from pydantic_settings import NoDecode, SettingsConfigDict

from adapters._credentials import ConnectionSecurity, ssl_context
from core.partitioning import DEFAULT_PARTITIONS

__all__ = ["KafkaSettings"]

_TOPIC = r"^[A-Za-z0-9._-]{1,200}$"


class KafkaSettings(ConnectionSecurity):
    """Connection, topic and consumer settings of the Kafka adapters.

    ``bootstrap_servers``: ``host:port`` strings; from the environment a comma-separated
    list (``SHOAL_KAFKA_BOOTSTRAP_SERVERS=10.0.0.1:9092,10.0.0.2:9092``).
    ``partitions`` also reads ``SHOAL_PARTITIONS`` (the services' setting), so the topic
    is checked against the partition count every service uses.

    Durability: the producer uses acks=all and idempotence. Kafka acknowledges a write
    once every in-sync replica has it *in memory* (it does not fsync by default), so a
    killed broker process keeps acked messages (the OS has them), but a machine that
    dies loses recent ones unless the topic has replicas on other machines:
    ``replication_factor=3`` with ``min_insync_replicas=2`` in production, or
    ``topic_config={"flush.messages": "1"}`` (fsync every message; slow) on one node.

    Credentials and TLS, applied to every client the Kafka adapters create (through
    ``client_options``): ``security_protocol`` (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL);
    with SASL, ``sasl_mechanism`` (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512), ``sasl_username``
    and ``sasl_password`` (or ``sasl_password_file``); with SSL, ``tls_ca_file`` (else the
    system's CAs), ``tls_cert_file`` + ``tls_key_file`` (see ``adapters._credentials``).
    """

    _SECRETS: ClassVar[tuple[str, ...]] = ("sasl_password",)

    model_config = SettingsConfigDict(
        env_prefix="SHOAL_KAFKA_", extra="ignore", populate_by_name=True
    )

    bootstrap_servers: Annotated[tuple[str, ...], NoDecode] = Field(
        default=("127.0.0.1:9092",),
        description="comma-separated `host:port` (at least one)",
    )
    client_id: str = Field(
        default="shoal", min_length=1, description="the client id of every Kafka client"
    )
    group: str = Field(
        default="default",
        pattern=r"^[A-Za-z0-9_-]{1,64}$",
        description="the group, for the adapter used alone: the services pass "
        "`SHOAL_GROUP`, which wins",
    )
    position: str | None = Field(
        default=None,
        pattern=r"^[A-Za-z0-9_-]{1,64}$",
        description="a broadcast handler's own position (its id), given by the handler to "
        "its transport (`KafkaTransport(position=...)`) rather than read from the "
        "environment: leave it unset",
    )
    topic: str = Field(
        default="shoal.data",
        pattern=_TOPIC,
        description="the data topic, one partition per shoal partition",
    )
    partitions: int = Field(
        default=DEFAULT_PARTITIONS,
        ge=1,
        le=100_000,
        validation_alias=AliasChoices("partitions", "SHOAL_KAFKA_PARTITIONS", "SHOAL_PARTITIONS"),
        description="the data topic's partitions, checked against an existing topic; the "
        "services always pass `SHOAL_PARTITIONS`",
    )
    replication_factor: int = Field(
        default=1,
        ge=1,
        description="for the topics shoal creates (production: 3)",
    )
    min_insync_replicas: int = Field(
        default=1,
        ge=1,
        description="for the topics shoal creates (production: 2)",
    )
    retention_age: float | None = Field(
        default=None,
        gt=0,
        description="the data topic's retention.ms in seconds (unset: the broker's default, "
        "7 days): how far back `shoal replay` can read; set when the topic is created",
    )
    retention_bytes: int | None = Field(
        default=None,
        gt=0,
        description="the data topic's retention.bytes, per partition (unset: the broker's "
        "default, no cap); set when the topic is created. A size cap also drops records not "
        "yet consumed",
    )
    topic_config: dict[str, str] = Field(
        default_factory=dict,
        description="JSON of extra topic configs applied when creating topics (wins over "
        "the two retention settings)",
    )
    dead_letter_topic: str = Field(
        default="shoal.dlq", pattern=_TOPIC, description="the dead letters' topic"
    )
    registration_topic: str = Field(
        default="shoal.reg", pattern=_TOPIC, description="the project registrations' topic"
    )
    create_topics: bool = Field(default=True, description="create missing topics on enter")

    # per-message delivery semantics, emulated by the subscription (see _subscription)
    ack_wait: float = Field(
        default=30.0,
        gt=0,
        description="seconds a delivery may stay unsettled before it is redelivered "
        "(emulated; handlers keep buffered ones alive)",
    )
    max_ack_pending: int = Field(
        default=20_000,
        ge=1,
        description="unsettled deliveries per subscription (a handler's buffered rows of the "
        "partition count: keep it at least the handler's roll_rows)",
    )
    duplicate_window: float = Field(
        default=120.0,
        ge=0,
        description="message-id de-duplication on consume: its window (seconds)",
    )
    duplicate_cache: int = Field(
        default=100_000, ge=0, description="message ids remembered for de-duplication"
    )
    track_deliveries: bool = Field(
        default=True,
        description="commit delivery counts before a fetch returns, so the retry budget "
        "holds across handler crashes (first deliveries: one commit per 2,000 offsets read; "
        "redeliveries: one per fetch)",
    )

    # timeouts (seconds)
    connect_timeout: float = Field(default=10.0, gt=0, description="bound on entering")
    request_timeout: float = Field(
        default=10.0, gt=0, description="every broker request (metadata, commit, admin)"
    )
    publish_timeout: float = Field(default=10.0, gt=0, description="one publish() call")
    close_timeout: float = Field(default=5.0, gt=0, description="bound on leaving")
    retry_backoff: float = Field(
        default=0.1, gt=0, description="wait before retrying a failed broker request"
    )

    # producer tuning
    max_pending_sends: int = Field(
        default=10_000, ge=1, description="publish window of unconfirmed sends"
    )
    linger: float = Field(default=0.0, ge=0, description="producer linger (seconds)")
    max_batch_bytes: int = Field(
        default=256 * 1024, ge=1024, description="producer batch size (bytes)"
    )
    fetch_max_bytes: int = Field(
        default=1024 * 1024,
        ge=1024,
        description="per subscribed partition: what the transport's reader prefetches of it",
    )

    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = Field(
        default="PLAINTEXT", description="how every client connects to the brokers"
    )
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] = Field(
        default="PLAIN", description="with `SASL_*`"
    )
    sasl_username: str | None = Field(
        default=None, description="required with `SASL_*`, refused without it"
    )
    sasl_password: SecretStr | None = Field(default=None, description="its password")
    sasl_password_file: Path | None = None

    @field_validator("bootstrap_servers", mode="before")
    @classmethod
    def _split_servers(cls, value: object) -> object:
        if isinstance(value, str):
            value = tuple(part.strip() for part in value.split(",") if part.strip())
        if isinstance(value, list | tuple) and not value:
            raise ValueError("SHOAL_KAFKA_BOOTSTRAP_SERVERS: at least one host:port is needed")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        topics = {self.topic, self.dead_letter_topic, self.registration_topic}
        if len(topics) != 3:
            raise ValueError("topic, dead_letter_topic and registration_topic must differ")
        if self.min_insync_replicas > self.replication_factor:
            raise ValueError(
                f"min_insync_replicas {self.min_insync_replicas} exceeds "
                f"replication_factor {self.replication_factor}"
            )
        return self

    @model_validator(mode="after")
    def _credentials(self) -> Self:
        protocol = self.env_name("security_protocol")
        sasl = self.security_protocol.startswith("SASL_")
        if sasl:
            if not self.sasl_username:
                raise ValueError(
                    f"{self.env_name('sasl_username')}: needed with {protocol}="
                    f"{self.security_protocol}"
                )
            self.require_secret(
                "sasl_password", f"{self.env_name('sasl_username')} is set without a password"
            )
        elif self.sasl_username or self.has_secret("sasl_password"):
            raise ValueError(
                f"{self.env_name('sasl_username')}: SASL credentials need {protocol}="
                f"SASL_PLAINTEXT or SASL_SSL (it is {self.security_protocol})"
            )
        if self.tls_server_name:
            raise ValueError(
                f"{self.env_name('tls_server_name')}: not supported for Kafka (aiokafka checks "
                "the broker's advertised host name)"
            )
        if self.tls_enabled and not self.ssl_wanted:
            raise ValueError(
                f"{protocol}: TLS settings need SSL or SASL_SSL (it is {self.security_protocol})"
            )
        return self

    @property
    def ssl_wanted(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    @property
    def bootstrap(self) -> str:
        """Comma-separated, as Kafka tools take it."""
        return ",".join(self.bootstrap_servers)

    @property
    def offsets_group_id(self) -> str:
        """The group the transport commits offsets under (never joined). A position's
        group has ``.handler.`` in its name: no handler id can make it the shared
        ``shoal.{group}`` or another name shoal uses."""
        if self.position is None:
            return f"shoal.{self.group}"
        return f"shoal.{self.group}.handler.{self.position}"

    def data_topic_config(self) -> dict[str, str]:
        """The data topic's configs at creation: retention from the two settings above,
        then ``topic_config`` (which wins)."""
        retention: dict[str, str] = {}
        if self.retention_age is not None:
            retention["retention.ms"] = str(self.ms(self.retention_age))
        if self.retention_bytes is not None:
            retention["retention.bytes"] = str(self.retention_bytes)
        return {**retention, **self.topic_config}

    def ms(self, seconds: float) -> int:
        """Seconds as whole milliseconds (aiokafka takes ``*_ms`` integers)."""
        return max(1, round(seconds * 1000))

    def client_options(self) -> dict[str, Any]:
        """What every aiokafka client of the Kafka adapters is built with: where, the
        credentials and TLS, the default timeouts (a client may override the last two)."""
        return {
            "bootstrap_servers": list(self.bootstrap_servers),
            "request_timeout_ms": self.ms(self.request_timeout),
            "retry_backoff_ms": self.ms(self.retry_backoff),
            **self.security_options(),
        }

    def security_options(self) -> dict[str, Any]:
        """aiokafka's keywords for ``security_protocol`` and what it needs."""
        options: dict[str, Any] = {"security_protocol": self.security_protocol}
        if self.ssl_wanted:
            options["ssl_context"] = ssl_context(
                self.tls_ca_file, self.tls_cert_file, self.tls_key_file
            )
        if self.security_protocol.startswith("SASL_"):
            options["sasl_mechanism"] = self.sasl_mechanism
            options["sasl_plain_username"] = self.sasl_username
            options["sasl_plain_password"] = self.secret("sasl_password")
        return options

    def describe(self) -> str:
        """Where and as whom, for log lines and errors: no secret."""
        who = f", user {self.sasl_username}" if self.sasl_username else ""
        return f"{self.bootstrap} ({self.security_protocol}{who})"
