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

    group: str = Field(
        default="default",
        pattern=r"^[A-Za-z0-9_-]{1,64}$",
        description="one cluster of handlers: etcd prefix `/shoal/{group}`, Redis "
        "`shoal:{group}:`, Kafka `shoal.{group}...`, NATS KV bucket `shoal_{group}`",
    )
    partitions: int = Field(
        default=DEFAULT_PARTITIONS,
        ge=1,
        le=100_000,
        description="P, the partitions of the stream: fixed for the life of the stream",
    )
    # NATS for both by default: one nats-server runs the whole stack (as `shoal up` does).
    coordination: str = Field(
        default="nats",
        description="the coordination store: `nats` (JetStream KV, on the `SHOAL_NATS_URL` "
        "servers, or `SHOAL_NATS_KV_URL`'s when the coordination has a cluster of its own, "
        "with the same credentials and TLS; bucket options `SHOAL_NATS_KV_*`), `etcd`, "
        "`redis` or `kafka`",
    )
    transport: str = Field(
        default="nats", description="the broker between gateway and handlers: `nats` or `kafka`"
    )
    strategy: str = Field(
        default="sticky",
        description="the assignment strategy: `modulo`, `range`, `consistent-hash`, `sticky`, "
        "`fan-out`, `weighted`, `broadcast`",
    )
    consumption_mode: ConsumptionMode = Field(
        default=ConsumptionMode.EXCLUSIVE,
        description="how the group's handlers share a partition (core.modes): `exclusive` "
        "(one owner, per-project order kept), `shared` (`fan-out`'s k owners compete on it; "
        "NATS only; order lost), `broadcast` (every handler gets every message, at its own "
        "position, into its own table `{data_dir}-broadcast/{handler id}`; needs strategy "
        "`broadcast`, a set `SHOAL_HANDLER_ID`, NATS retention `limits`, no autoscaling). A "
        "mismatch stops every service at start-up (exit 2)",
    )
    log_format: Literal["text", "json"] = Field(
        default="text", description="`json`: one JSON object per line"
    )
    log_level: str = Field(default="INFO", description="the Python log level")

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

    clusters: str | None = Field(
        default=None,
        description="the cluster map, `east=nats://a:4222|nats://b:4222,west=nats://c:4222`: "
        "one separate NATS deployment per datacenter, each reached with the `SHOAL_NATS_*` "
        "settings but its own addresses; unset: one cluster, no routing",
    )
    cluster: str | None = Field(
        default=None,
        description="this process's own datacenter (required for a gateway): where projects "
        "routed `@local` (the default) are published",
    )
    routes_file: Path = Field(
        default=Path("var/routes.json"),
        description="the route table (`shoal migrate` writes it); none: the default table, "
        "every project produced locally and consumed from every cluster",
    )
    routes_poll: float = Field(
        default=0.2,
        gt=0,
        description="seconds between two reads of the route file by a handler (gateways "
        "read it on every request)",
    )

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

    id: str = Field(
        default_factory=lambda: default_instance_id("gw"),
        json_schema_extra={"default_text": "gw-{host}-{pid}"},
        description="the gateway id's prefix: each process start appends a random suffix "
        "(`{id}.{6 hex digits}`; its sequences start at 1), so the audit never mixes two "
        "processes' series",
    )
    host: str = Field(default="127.0.0.1", description="the ingest API's address")
    port: int = Field(default=8080, ge=0, le=65535, description="the ingest API's port")
    max_body_bytes: int = Field(
        default=4 * 1024 * 1024, ge=1, description="a larger request body: 413"
    )
    max_message_bytes: int = Field(default=256 * 1024, ge=1, description="a larger message: 413")
    max_messages_per_request: int = Field(
        default=10_000, ge=1, description="more messages in one request: 413"
    )
    publish_timeout: float = Field(
        default=10.0,
        gt=0,
        description="seconds: one publish attempt's bound on the broker's confirmation",
    )
    publish_deadline: float = Field(
        default=20.0,
        gt=0,
        description="an attempt that was not confirmed may still have been stored, so the "
        "gateway publishes the same messages (the same ids: the broker's or the "
        "subscriptions' duplicate window drops a second copy) again until the broker "
        "confirms or this many seconds passed since the first; only then 503. A 503 after a "
        "store would make a client without an Idempotency-Key send the messages again under "
        "new ids. A refusal (a full stream stored none of the batch) is a 503 at once",
    )
    retry_after_seconds: int = Field(
        default=2, ge=1, description="the `Retry-After` of a 503 (seconds)"
    )
    max_concurrent_requests: int = Field(
        default=256,
        ge=1,
        description="ingest requests in flight at once (reading, parsing, publishing); the "
        "next gets 503 with `Retry-After`",
    )
    max_bytes_in_flight: int = Field(
        default=128 * 1024 * 1024,
        ge=1,
        description="the byte budget of the ingest requests in flight, each counted before "
        "its body is read (core.ingest.reservation_for): twice its `Content-Length`, or "
        "`SHOAL_GATEWAY_MAX_BODY_BYTES` when it declares none; gzipped, its body and twice "
        "that limit. One that does not fit gets 503 with `Retry-After` at once. At least 3 x "
        "`SHOAL_GATEWAY_MAX_BODY_BYTES`. 128 MiB: 16 bodies of 4 MiB, or 2,048 of 32 KiB "
        "(the request count binds first); with the process's own ~90 MiB it fits the k8s "
        "pod's memory limit",
    )
    max_tracked_projects: int = Field(
        default=100_000,
        ge=1,
        description="projects whose sequence counter and announcement a gateway keeps (the "
        "least recently used forgotten past it); a forgotten project that posts again starts "
        "a new series under gateway id `{id}~{generation}` and is announced again",
    )
    reannounce_interval: float = Field(
        default=3600.0,
        gt=0,
        description="seconds: a project is announced again with its next message once its "
        "last announcement is this old (a registration that expired or was refused is made "
        "again)",
    )
    ledger_dir: Path | None = Field(
        default=None,
        description="write the acceptance ledger to `{dir}/{gateway id}.jsonl` (the audit "
        "looks in `DATA_DIR/_ledger`); unset: no ledger",
    )
    api_keys_file: Path | None = Field(
        default=None,
        description="the API keys (`shoal keys`); the gateway refuses to start when it is "
        "unset (unless `SHOAL_GATEWAY_ALLOW_ANONYMOUS=true`), missing or malformed, and "
        "re-reads it when it changes",
    )
    allow_anonymous: bool = Field(
        default=False,
        description="`true`: start without API keys and take any request (a warning at start-up)",
    )
    key_rate: float = Field(
        default=200.0,
        gt=0,
        description="requests per second per API key and gateway process (bursts of twice "
        "that); past it: 429 with `Retry-After`. A key's own `--rate` wins",
    )
    idempotency_window: float = Field(
        default=600.0,
        gt=0,
        description="seconds an `Idempotency-Key`'s answer is kept for its retries, in the "
        "broker-side store",
    )
    metrics_host: str = Field(
        default="127.0.0.1",
        description="the address of Prometheus `/metrics`, served apart from the ingest "
        "port (which answers `/metrics` with 404)",
    )
    metrics_port: int = Field(
        default=0, ge=0, le=65535, description="the port of `/metrics`; 0: not served"
    )

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

    id: str = Field(
        default_factory=lambda: default_instance_id("h"),
        json_schema_extra={"default_text": "h-{host}-{pid}"},
        description="the member id (a broadcast handler's position and table follow it: "
        "set it there)",
    )
    lease_ttl: float = Field(
        default=10.0,
        gt=0,
        description="seconds: the handler's lease, renewed every min(TTL/2, the store's "
        "max renew interval, 5 s)",
    )
    stats_interval: float = Field(
        default=5.0,
        gt=0,
        description="seconds between two load reports (cpu, project_count, rate)",
    )
    data_dir: str = Field(
        default="var/data",
        min_length=1,
        description="the landing zone: a Delta table in this directory or at "
        "`s3://bucket/prefix` (`SHOAL_S3_*` / `AWS_*`)",
    )
    fetch_batch: int = Field(
        default=500,
        ge=1,
        le=10_000,
        description="messages per fetch of one partition (all partitions fill one buffer)",
    )
    max_deliver: int = Field(
        default=10,
        ge=1,
        description="the retry budget: a message back after this many deliveries that never "
        "landed it (it crashed or stalled every handler it reached) is dead-lettered, on "
        "every transport. Redeliveries shoal caused itself do not count: what a handler gave "
        "back when its partition moved, its lease dropped or the partition was opened again "
        "(a crash counts)",
    )
    fetch_timeout: float = Field(
        default=0.5, gt=0, description="seconds: the broker-side wait of one pull"
    )
    drain_timeout: float = Field(
        default=8.0,
        gt=0,
        description="seconds: the bound on the graceful drain at SIGTERM (the process exits "
        "at most 5 s later)",
    )
    claim_patience: float = Field(
        default=60.0,
        gt=0,
        description="seconds: a granted partition whose previous holder is still live is "
        "waited for this long (from when the current hold was first seen), then taken over: "
        "a holder that never releases (stuck, or it missed the revocation) must not stop the "
        "partition. Must exceed `SHOAL_HANDLER_DRAIN_TIMEOUT`",
    )
    retry_delay: float = Field(
        default=0.5,
        gt=0,
        description="seconds: the backoff after a failed write or partition worker, doubling "
        "to `SHOAL_HANDLER_RETRY_CAP`; a failed write is never nak'd: the batch stays "
        "buffered and kept alive",
    )
    retry_cap: float = Field(default=10.0, gt=0, description="seconds: the backoff's cap")
    roll_rows: int = Field(
        default=10_000,
        ge=1,
        description="a Parquet file is written when the buffer holds this many rows (or "
        "reaches `SHOAL_HANDLER_ROLL_BYTES` or `SHOAL_HANDLER_ROLL_AGE`, whichever comes "
        "first); its messages are acked after the file is durable and its Delta commit "
        "landed",
    )
    roll_bytes: int = Field(
        default=64 * 1024 * 1024, ge=1, description="...or this many bytes (see ROLL_ROWS)"
    )
    roll_age: float = Field(
        default=20.0, gt=0, description="...or this age in seconds (see ROLL_ROWS)"
    )
    roll_handover_age: float = Field(
        default=0.2,
        gt=0,
        description="seconds: a buffer holding a partition's first rows, fetched this soon "
        "after its claim (a join, a takeover: a moved partition's backlog), rolls this soon "
        "too: moved partitions show data within a second",
    )
    roll_idle_age: float = Field(
        default=1.0,
        gt=0,
        description="seconds: a buffer nothing was added to for this long, and for 20 times "
        "the usual gap between fetched batches, rolls (a burst ended: its tail is not held; "
        "a slow steady stream keeps large files)",
    )
    write_timeout: float = Field(
        default=30.0,
        gt=0,
        description="seconds: one attempt to write a file (a stalled volume fails it, then "
        "it is retried)",
    )
    ownership_margin: float | None = Field(
        default=None,
        ge=0,
        description="seconds of lease that must remain when a file becomes visible and when "
        "it is acked: covers the rename, the ack and clock drift between this host and the "
        "store; unset: a fifth of the lease TTL (2 s of 10 s)",
    )
    keepalive_interval: float = Field(
        default=10.0,
        gt=0,
        description="seconds: in-progress acks for messages buffered this long; never more "
        "than a third of the transport's ack wait (NATS and Kafka: 30 s by default), "
        "whatever is set here",
    )
    project_idle: float = Field(
        default=300.0,
        gt=0,
        description="seconds: a project counts toward project_count while it sent data this "
        "recently",
    )
    top_projects: int = Field(
        default=10,
        ge=0,
        le=100,
        description="each load report carries this many registered projects with the most "
        "rows landed in the last `SHOAL_HANDLER_PROJECT_WINDOW`: the status document's "
        "project ranking",
    )
    project_window: float = Field(
        default=60.0,
        gt=0,
        description="seconds, rounded up to whole stats intervals: the window of the "
        "project ranking",
    )
    registration_ttl: float = Field(
        default=24 * 3600.0,
        gt=0,
        description="seconds: a project's registration (the registry, in the coordination "
        "store) expires this long after its last refresh; the owner refreshes the projects "
        "that sent data every quarter of it",
    )
    max_projects_per_partition: int = Field(
        default=100_000,
        ge=1,
        description="live registrations per partition; past it a new project is not "
        "registered (a warning, `shoal_handler_registrations_refused_total`), its data "
        "still lands",
    )
    metrics_host: str = Field(
        default="127.0.0.1", description="the address of Prometheus `/metrics`"
    )
    metrics_port: int = Field(
        default=0, ge=0, le=65535, description="the port of `/metrics`; 0: not served"
    )

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

    id: str = Field(
        default_factory=lambda: default_instance_id("leader"),
        json_schema_extra={"default_text": "leader-{host}-{pid}"},
        description="the candidate id",
    )
    lease_ttl: float = Field(default=10.0, gt=0, description="seconds: the leadership lease")
    debounce: float = Field(
        default=0.2,
        ge=0,
        description="seconds: a burst of member changes becomes one rebalance",
    )
    reconcile_interval: float = Field(
        default=20.0,
        gt=0,
        description="seconds between two periodic reconciles (each also re-reads the weights file)",
    )
    host: str = Field(
        default="127.0.0.1",
        description="the address of the status API, its event stream and the dashboard: "
        "this machine only, unless set (docker compose and the k8s ConfigMap set 0.0.0.0)",
    )
    port: int = Field(
        default=8090,
        ge=0,
        le=65535,
        description="the port of the status API, event stream and dashboard",
    )
    metrics_host: str = Field(
        default="127.0.0.1",
        description="the address of Prometheus `/metrics`, on a port of its own (among them "
        "`shoal_partition_lag{partition}`, `shoal_partition_oldest_unacked_age_seconds"
        "{partition}`, `shoal_backlog_alerting_partitions`, `shoal_backlog_alerts_total`)",
    )
    metrics_port: int = Field(
        default=0, ge=0, le=65535, description="the port of `/metrics`; 0: not served"
    )
    peers: Annotated[tuple[str, ...], NoDecode] = Field(
        default=(),
        description="comma-separated status API base URLs of the other replicas: a standby "
        "copies their rebalance and scaling history and shows the active leader's",
    )
    weights_file: Path | None = Field(
        default=None,
        description="`shoal analytics weights` output: the `weighted` strategy balances "
        "these loads",
    )
    backlog_alert_age: float = Field(
        default=60.0,
        gt=0,
        description="seconds: the active leader logs one WARNING `partition backlog too old` "
        "(group, partition, oldest unacked age, lag, threshold) when a partition's oldest "
        "unacked message gets older than this, and one `partition backlog recovered` when "
        "it no longer is",
    )
    backlog_interval: float = Field(
        default=5.0,
        gt=0,
        description="seconds: how often the active leader looks for the backlog alert "
        "(reads are shared with the status API, at most one every 2 s) and trims landed "
        "messages from a NATS stream near its cap (`SHOAL_NATS_TRIM_AT`)",
    )
    top_projects: int = Field(
        default=10,
        ge=0,
        le=100,
        description="projects in the status document's volume ranking",
    )

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
