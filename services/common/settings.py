"""Configuration for every service: environment variables with the prefix ``SHOAL_``.

Adapter-specific settings (``SHOAL_ETCD_*``, ``SHOAL_NATS_*`` ...) live with their adapters.
"""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path
from typing import Annotated, Literal, Self, TypeVar

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from core.assignment import STRATEGIES
from core.errors import RouteError
from core.modes import ConsumptionMode, mode_problem
from core.partitioning import DEFAULT_PARTITIONS
from core.routing import ClusterMap, parse_cluster_map

TRANSPORT_BACKENDS = ("nats", "kafka")


def default_instance_id(role: str) -> str:
    return f"{role}-{socket.gethostname()}-{os.getpid()}"


class ShoalSettings(BaseSettings):
    """Settings every service reads. Unknown backend or strategy names fail at start-up."""

    model_config = SettingsConfigDict(env_prefix="SHOAL_", extra="ignore")

    group: str = Field(default="default", pattern=r"^[A-Za-z0-9_-]{1,64}$")
    partitions: int = Field(default=DEFAULT_PARTITIONS, ge=1, le=100_000)
    # NATS for both by default: one nats-server runs the whole stack (as `shoal up` does).
    coordination: str = "nats"
    transport: str = "nats"
    strategy: str = "sticky"
    # How the group's handlers share a partition (core.modes): exclusive, shared, broadcast.
    consumption_mode: ConsumptionMode = ConsumptionMode.EXCLUSIVE
    log_format: Literal["text", "json"] = "text"
    log_level: str = "INFO"

    @field_validator("coordination")
    @classmethod
    def _known_coordination(cls, value: str) -> str:
        from services.common.backends import COORDINATION_BACKENDS  # noqa: PLC0415 (a cycle)

        return _one_of(value, COORDINATION_BACKENDS)

    @field_validator("transport")
    @classmethod
    def _known_transport(cls, value: str) -> str:
        return _one_of(value, TRANSPORT_BACKENDS)

    @field_validator("strategy")
    @classmethod
    def _known_strategy(cls, value: str) -> str:
        return _one_of(value, tuple(sorted(STRATEGIES)))

    @model_validator(mode="after")
    def _mode_fits(self) -> Self:
        # here, not at the top: the backends module reads these settings
        from services.common.backends import transport_features  # noqa: PLC0415

        features = transport_features(self.transport)
        problem = mode_problem(self.consumption_mode, self.strategy, features)
        if problem is not None:
            raise ValueError(
                f"SHOAL_CONSUMPTION_MODE={self.consumption_mode} with "
                f"SHOAL_STRATEGY={self.strategy}, SHOAL_TRANSPORT={self.transport}: {problem}"
            )
        return self


class RoutingSettings(BaseSettings):
    """Multi-datacenter routing (``core.routing``); off unless ``SHOAL_CLUSTERS`` is set.
    NATS JetStream only: each cluster is one NATS deployment reached with the
    ``SHOAL_NATS_*`` settings but its own addresses."""

    model_config = SettingsConfigDict(env_prefix="SHOAL_", extra="ignore")

    # east=nats://a:4222|nats://b:4222,west=nats://c:4222
    clusters: str | None = None
    # This process's own datacenter: where a gateway publishes projects routed LOCAL.
    cluster: str | None = None
    # The route table (``shoal migrate`` writes it); without it the default table holds.
    routes_file: Path = Path("var/routes.json")
    routes_poll: float = Field(default=0.2, gt=0)

    @property
    def cluster_map(self) -> ClusterMap | None:
        return None if self.clusters is None else parse_cluster_map(self.clusters)

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if self.clusters is None:
            return self
        try:
            names = parse_cluster_map(self.clusters).names
        except RouteError as exc:
            raise ValueError(f"SHOAL_CLUSTERS: {exc}") from None
        if self.cluster is not None and self.cluster not in names:
            raise ValueError(f"SHOAL_CLUSTER: {self.cluster!r} is not one of {list(names)}")
        return self


class GatewaySettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="SHOAL_GATEWAY_", extra="ignore")

    id: str = Field(default_factory=lambda: default_instance_id("gw"))
    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=0, le=65535)
    max_body_bytes: int = Field(default=4 * 1024 * 1024, ge=1)
    max_message_bytes: int = Field(default=256 * 1024, ge=1)
    max_messages_per_request: int = Field(default=10_000, ge=1)
    publish_timeout: float = Field(default=10.0, gt=0)
    # Unconfirmed publishes are made again with the same messages (ids) until this many
    # seconds after the first: a 503 only once the broker has had this long.
    publish_deadline: float = Field(default=20.0, gt=0)
    retry_after_seconds: int = Field(default=2, ge=1)
    # Ingest requests in flight at once (reading, parsing, publishing); past it: 503.
    max_concurrent_requests: int = Field(default=256, ge=1)
    # Bytes the ingest requests in flight may hold at once, each counted before its body
    # is read (core.ingest.reservation_for: twice its declared body, or the limit when it
    # declares none; gzipped: its body and twice the limit); a request that does not fit:
    # 503 at once. 128 MiB: 16 bodies of 4 MiB, or 2,048 of 32 KiB (the request count
    # binds first); with the process's own ~90 MiB it fits the k8s pod's memory limit.
    max_bytes_in_flight: int = Field(default=128 * 1024 * 1024, ge=1)
    # Projects whose sequence counter and announcement are kept (LRU); a project forgotten
    # and seen again starts a new series {id}~{generation} and is announced again.
    max_tracked_projects: int = Field(default=100_000, ge=1)
    # A project is announced again with its next message once its last announcement is
    # this old (seconds): its registration, if it expired or was refused, is made again.
    reannounce_interval: float = Field(default=3600.0, gt=0)
    # Where the acceptance ledger goes ({dir}/{id}.jsonl); unset: no ledger.
    ledger_dir: Path | None = None
    # The API keys (`shoal keys`). Unset, the gateway does not start unless
    # allow_anonymous is true (then it takes any request and logs a warning).
    api_keys_file: Path | None = None
    allow_anonymous: bool = False
    # Requests per second per key and gateway process (bursts of twice that); past it: 429.
    key_rate: float = Field(default=200.0, gt=0)
    # How long an Idempotency-Key's answer is kept (seconds) in the broker-side store.
    idempotency_window: float = Field(default=600.0, gt=0)
    # Prometheus /metrics, apart from the public ingest port; port 0: not served.
    metrics_host: str = "127.0.0.1"
    metrics_port: int = Field(default=0, ge=0, le=65535)

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if self.max_bytes_in_flight < 3 * self.max_body_bytes:
            raise ValueError(
                f"SHOAL_GATEWAY_MAX_BYTES_IN_FLIGHT ({self.max_bytes_in_flight}) is below "
                f"three times SHOAL_GATEWAY_MAX_BODY_BYTES ({3 * self.max_body_bytes}): a "
                "gzipped body of the largest size could never be taken"
            )
        if self.metrics_port and self.metrics_port == self.port:
            raise ValueError(
                f"SHOAL_GATEWAY_METRICS_PORT {self.metrics_port} is the ingest port: "
                "metrics are served apart from it"
            )
        return self

    def anonymous_problem(self) -> str | None:
        """Why this gateway must not start: no API keys and no explicit opt-in to take
        requests from anyone. None when it may."""
        if self.api_keys_file is not None or self.allow_anonymous:
            return None
        return (
            "SHOAL_GATEWAY_API_KEYS_FILE is unset: the gateway would take any request "
            "from anyone; name a keys file (`shoal keys create --file PATH ...`) or set "
            "SHOAL_GATEWAY_ALLOW_ANONYMOUS=true to run without authentication"
        )


class HandlerSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="SHOAL_HANDLER_", extra="ignore")

    id: str = Field(default_factory=lambda: default_instance_id("h"))
    lease_ttl: float = Field(default=10.0, gt=0)
    stats_interval: float = Field(default=5.0, gt=0)
    data_dir: str = Field(
        default="var/data",
        min_length=1,
        description="the landing zone: a directory, or s3://bucket/prefix (SHOAL_S3_* / AWS_*)",
    )
    fetch_batch: int = Field(default=500, ge=1, le=10_000)
    # The retry budget: a message that comes back after this many deliveries that never
    # landed it (it crashed or stalled every handler it reached) is dead-lettered.
    max_deliver: int = Field(default=10, ge=1)
    fetch_timeout: float = Field(default=0.5, gt=0)
    drain_timeout: float = Field(default=8.0, gt=0)
    # A granted partition whose previous holder is still live is waited for this long
    # (from when the current hold was first seen), then taken over: a holder that never
    # releases (stuck, or it missed the revocation) must not stop the partition.
    claim_patience: float = Field(default=60.0, gt=0)
    # Backoff after a failed write or partition worker: retry_delay, doubling to retry_cap.
    retry_delay: float = Field(default=0.5, gt=0)
    retry_cap: float = Field(default=10.0, gt=0)
    # A file rolls at roll_rows rows, roll_bytes bytes or roll_age seconds, first reached.
    roll_rows: int = Field(default=10_000, ge=1)
    roll_bytes: int = Field(default=64 * 1024 * 1024, ge=1)
    roll_age: float = Field(default=20.0, gt=0)
    # ...or after roll_handover_age when it holds a partition's first rows, fetched within
    # roll_handover_age of its claim (a moved partition's backlog).
    roll_handover_age: float = Field(default=0.2, gt=0)
    # ...or once nothing was added for roll_idle_age (a burst ended: do not hold its tail).
    roll_idle_age: float = Field(default=1.0, gt=0)
    # One attempt to write a file; a stalled volume fails it (and it is retried).
    write_timeout: float = Field(default=30.0, gt=0)
    # Lease time that must remain when a file becomes visible and when it is acked:
    # covers the rename, the ack and clock drift between this host and the store.
    # Default: a fifth of the lease TTL (2 s of 10 s).
    ownership_margin: float | None = Field(default=None, ge=0)
    # In-progress acks for messages buffered this long; never more than a third of the
    # transport's ack_wait (NATS and Kafka: 30 s by default), whatever is set here.
    keepalive_interval: float = Field(default=10.0, gt=0)
    # A project counts toward project_count while it sent data this recently (seconds).
    project_idle: float = Field(default=300.0, gt=0)
    # Each load report carries the top_projects registered projects with the most rows
    # landed in the last project_window seconds (rounded up to whole stats intervals).
    top_projects: int = Field(default=10, ge=0, le=100)
    project_window: float = Field(default=60.0, gt=0)
    # A project's registration (the registry, in the coordination store) lives this long
    # (seconds) past its last refresh; the owner refreshes the projects that sent data every
    # quarter of it. At most max_projects_per_partition live registrations per partition:
    # past it a new project is not registered (its data still lands).
    registration_ttl: float = Field(default=24 * 3600.0, gt=0)
    max_projects_per_partition: int = Field(default=100_000, ge=1)
    metrics_host: str = "127.0.0.1"
    metrics_port: int = Field(default=0, ge=0, le=65535)

    @property
    def margin(self) -> float:
        """The ownership margin in force."""
        return self.lease_ttl / 5 if self.ownership_margin is None else self.ownership_margin

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if self.margin >= self.lease_ttl:
            raise ValueError(
                f"ownership_margin {self.margin} s must be below lease_ttl "
                f"{self.lease_ttl} s, or no file could ever be written"
            )
        if self.retry_cap < self.retry_delay:
            raise ValueError(
                f"retry_cap {self.retry_cap} s is below retry_delay {self.retry_delay} s"
            )
        if self.claim_patience <= self.drain_timeout:
            raise ValueError(
                f"claim_patience {self.claim_patience} s must exceed drain_timeout "
                f"{self.drain_timeout} s, or a healthy holder's drain would be cut short"
            )
        return self


class LeaderSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="SHOAL_LEADER_", extra="ignore")

    id: str = Field(default_factory=lambda: default_instance_id("leader"))
    lease_ttl: float = Field(default=10.0, gt=0)
    debounce: float = Field(default=0.2, ge=0)
    reconcile_interval: float = Field(default=20.0, gt=0)
    # The status API, its event stream and the dashboard: this machine only, unless set
    # (docker compose and the k8s ConfigMap set 0.0.0.0).
    host: str = "127.0.0.1"
    port: int = Field(default=8090, ge=0, le=65535)
    # Prometheus /metrics, on a port of its own; 0: not served.
    metrics_host: str = "127.0.0.1"
    metrics_port: int = Field(default=0, ge=0, le=65535)
    # Status API base URLs of the other replicas: a standby shows the active leader's
    # rebalance and scaling history (comma-separated from the environment).
    peers: Annotated[tuple[str, ...], NoDecode] = ()
    # `shoal analytics weights` output: the `weighted` strategy balances these loads.
    weights_file: Path | None = None
    # The backlog alert: a WARNING when a partition's oldest unacked message is older than
    # backlog_alert_age seconds (and one when it recovers), looked at every backlog_interval.
    backlog_alert_age: float = Field(default=60.0, gt=0)
    backlog_interval: float = Field(default=5.0, gt=0)
    # How many projects the status document's volume ranking shows.
    top_projects: int = Field(default=10, ge=0, le=100)

    @field_validator("peers", mode="before")
    @classmethod
    def _split_peers(cls, value: object) -> object:
        if isinstance(value, str):
            return tuple(part.strip() for part in value.split(",") if part.strip())
        return value

    @model_validator(mode="after")
    def _metrics_apart(self) -> Self:
        if self.metrics_port and self.metrics_port == self.port:
            raise ValueError(
                f"SHOAL_LEADER_METRICS_PORT {self.metrics_port} is the status API's port: "
                "metrics are served apart from it"
            )
        return self


def _one_of(value: str, valid: tuple[str, ...]) -> str:
    if value not in valid:
        raise ValueError(f"{value!r} is not one of: {', '.join(valid)}")
    return value


SettingsT = TypeVar("SettingsT", bound=BaseSettings)


def load_settings(cls: type[SettingsT]) -> SettingsT:
    """Read ``cls`` from the environment; on bad values print which and exit with status 2."""
    try:
        return cls()
    except ValidationError as exc:
        prefix = str(cls.model_config.get("env_prefix", ""))
        for error in exc.errors():
            name = prefix + "_".join(str(part) for part in error["loc"]).upper()
            message = str(error["msg"]).removeprefix("Value error, ")
            if not error["loc"] and prefix and message.startswith(prefix):
                # a check across settings: its message starts with the variable at fault
                print(f"error: {message}", file=sys.stderr)
                continue
            print(f"error: {name}: {message}", file=sys.stderr)
        raise SystemExit(2) from None
