"""``NatsSettings``: everything the NATS JetStream transport reads (env prefix ``SHOAL_NATS_``);
the NATS KV coordination adapters (``adapters.natskv``) connect with its URL, credentials
and TLS too."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar, Literal, Self
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import SettingsConfigDict

from adapters._credentials import ConnectionSecurity

__all__ = ["NatsSettings", "replica_count"]

_TOKEN = r"[A-Za-z0-9_-]+"
_SUBJECT_PREFIX = rf"^{_TOKEN}(\.{_TOKEN})*$"


def replica_count(value: object) -> object:
    """A replica count as an environment variable gives it: the text ``"3"`` is the count
    3 (a ``Literal`` of ints takes no text: ``SHOAL_NATS_REPLICAS=3``, as compose and the
    Kubernetes manifests set it, was refused at start)."""
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    return value


class NatsSettings(ConnectionSecurity):
    """Connection, stream and consumer settings of ``NatsTransport``.

    Durability comes from the server: fsync of every write is a *server* option
    (``jetstream { sync_interval: always }``, which infra/local sets unless asked for the
    relaxed mode) that a client cannot switch on; with ``monitor_url`` the transport checks
    it at start and refuses to run without it (``require_sync_always``). Memory storage, or
    one replica, loses acked messages when the server dies. (The stream's async persist
    mode is not offered: nats-server refuses it on a stream with atomic batch publish, err
    10052.)

    Credentials, one kind at most: ``user`` + ``password`` (or ``password_file``);
    ``token`` (or ``token_file``); ``nkey_seed_file`` (an nkey user's seed, ``SU...``);
    ``creds_file`` (a decentralised-auth user's JWT and seed, as ``nsc`` writes them).
    TLS: ``tls://`` URLs, or ``tls`` / any of ``tls_ca_file``, ``tls_cert_file`` +
    ``tls_key_file``, ``tls_server_name`` (see ``adapters._credentials``).
    """

    _SECRETS: ClassVar[tuple[str, ...]] = ("password", "token")

    model_config = SettingsConfigDict(env_prefix="SHOAL_NATS_", extra="ignore")

    url: str = Field(
        default="nats://127.0.0.1:4222",
        description="one URL, or several comma-separated for a cluster (`tls://` for TLS)",
    )
    name: str = Field(default="shoal", description="the client connection's name")
    cluster: str = Field(
        default="",
        pattern=r"^[A-Za-z0-9_-]*$",
        description="the datacenter this connection reaches (multi-datacenter routing, "
        "core.routing; set per cluster from `SHOAL_CLUSTERS`); part of the log id, so one "
        "partition read from two clusters is two logs. Empty with one cluster",
    )
    monitor_url: str | None = Field(
        default=None,
        description="every server's monitoring endpoint (`http://host:8222`, "
        "comma-separated): at start the transport reads each `/varz` and refuses to run (one "
        "`error:` line, exit 1) when a server does not fsync each write (`sync_interval: "
        "always`). `shoal up`, the e2e tests and docker compose set it; unset, the check is "
        "skipped (logged)",
    )
    require_sync_always: bool = Field(
        default=True,
        description="refuse to start when a monitored server does not fsync each write; "
        "`false` accepts it with a warning (`shoal up --nats-sync relaxed` sets it)",
    )
    refuse_while_disconnected: bool = Field(
        default=False,
        description="publish() and the idempotency store's calls refuse at once while the "
        "connection is down instead of waiting for it to come back (set per cluster by "
        "for_cluster: the gateway then fails over to another datacenter without a publish "
        "in doubt, and answers keyed requests from the other datacenters' stores)",
    )
    stream: str = Field(
        default="SHOAL", pattern=rf"^{_TOKEN}$", description="the data (work) stream"
    )
    subject_prefix: str = Field(
        default="handler.data.partitions",
        pattern=_SUBJECT_PREFIX,
        description="the data stream's subjects, one per partition under it",
    )
    storage: Literal["file", "memory"] = Field(
        default="file",
        description="the data stream's storage: `memory` (or one replica) loses acked "
        "messages when a server dies. Checked after the stream is created or updated: other "
        "storage or another replica count refuses to start",
    )
    replicas: Literal[1, 3] = Field(
        default=1,
        description="the data stream's replicas (3 in a cluster); a replica that is not "
        "current is logged",
    )
    retention: Literal["limits", "workqueue"] = Field(
        default="limits",
        description="`limits`: acks move each consumer's ack floor and messages age out "
        "after max_age or past max_bytes (cheap acks; `shoal replay` can read them; costs "
        "disk for the whole age); `workqueue`: an ack deletes the message (disk holds only "
        "the backlog; under sync_interval always, one fsync per ack; nothing to replay)",
    )
    max_age: float = Field(
        default=7 * 24 * 3600.0,
        gt=0,
        description="seconds, limits retention: how long a message is kept, landed or not "
        "(as Kafka's retention drops it)",
    )
    max_bytes: int | None = Field(
        default=1 << 30,
        gt=0,
        description="the data stream's size cap in bytes (unset: none), with `discard: new`: "
        "a full stream refuses new messages (the gateway answers 503 with `Retry-After`) and "
        "never drops one. nats-server reserves the cap out of its `max_file_store` for the "
        "stream (the coordination, idempotency and excusal buckets write into the rest); a "
        "cap it cannot reserve is refused at start",
    )
    trim_at: float = Field(
        default=0.5,
        gt=0,
        le=1,
        description="limits retention with max_bytes: once the stream holds this share of "
        "it, the active leader drops every message each partition's consumers have all "
        "acked (landed), keeping the unlanded ones; below it landed messages stay for "
        "`shoal replay` until max_age",
    )
    ack_wait: float = Field(
        default=30.0,
        gt=0,
        description="seconds: redelivery after this long unacked; handlers keep buffered messages "
        "alive with in-progress acks, so it only delays redelivery after a crash",
    )
    max_ack_pending: int = Field(
        default=50_000, ge=1, description="unacked deliveries per consumer"
    )
    duplicate_window: float = Field(
        default=120.0, gt=0, description="seconds: the message-id de-duplication window"
    )
    atomic_batch_max: int = Field(
        default=1000,
        ge=1,
        le=1000,
        description="a publish is sent as JetStream atomic batches of up to this many "
        "messages (one store, one fsync each; the server's limit is 1000)",
    )
    max_inflight_batches: int = Field(
        default=16,
        ge=1,
        le=50,
        description="atomic batches one process has open at once (the server allows 50 "
        "per stream across all publishers)",
    )
    dead_letter_stream: str = Field(
        default="SHOAL_DLQ", pattern=rf"^{_TOKEN}$", description="the dead-letter stream"
    )
    dead_letter_prefix: str = Field(
        default="shoal.dlq", pattern=_SUBJECT_PREFIX, description="its subjects"
    )
    dead_letter_max_age: float = Field(
        default=14 * 24 * 3600.0, gt=0, description="seconds: the dead letters' retention"
    )
    connect_timeout: float = Field(default=5.0, gt=0, description="seconds: the connect")
    request_timeout: float = Field(
        default=5.0, gt=0, description="seconds: every JetStream API call and ack"
    )
    publish_timeout: float = Field(
        default=10.0, gt=0, description="seconds: one publish() call, all its acks"
    )
    close_timeout: float = Field(default=5.0, gt=0, description="seconds: the close")
    reconnect_wait: float = Field(
        default=0.5, gt=0, description="seconds between two reconnect attempts"
    )
    user: str | None = Field(default=None, description="a user (with its password)")
    password: SecretStr | None = Field(default=None, description="the user's password")
    password_file: Path | None = None
    token: SecretStr | None = Field(default=None, description="a token")
    token_file: Path | None = None
    nkey_seed_file: Path | None = Field(
        default=None,
        description="an nkey user's seed file (`SU...`, as `nk -gen user` writes it)",
    )
    creds_file: Path | None = Field(
        default=None,
        description="a decentralised-auth `.creds` file (the user's JWT and seed, as `nsc` "
        "writes them)",
    )

    @field_validator("replicas", mode="before")
    @classmethod
    def _replicas(cls, value: object) -> object:
        return replica_count(value)

    @model_validator(mode="after")
    def _apart(self) -> Self:
        a, b = self.subject_prefix + ".", self.dead_letter_prefix + "."
        if a.startswith(b) or b.startswith(a):
            raise ValueError(
                f"dead_letter_prefix {self.dead_letter_prefix!r} and subject_prefix "
                f"{self.subject_prefix!r} overlap: the two streams need disjoint subjects"
            )
        if self.stream == self.dead_letter_stream:
            raise ValueError("stream and dead_letter_stream must differ")
        return self

    @model_validator(mode="after")
    def _credentials(self) -> Self:
        self.require_pair("user", "password")
        kinds = [
            name
            for name, present in (
                ("user", bool(self.user)),
                ("token", self.has_secret("token")),
                ("nkey_seed_file", self.nkey_seed_file is not None),
                ("creds_file", self.creds_file is not None),
            )
            if present
        ]
        if len(kinds) > 1:
            raise ValueError(
                f"{self.env_name(kinds[0])}: one kind of credentials at most, also set: "
                + ", ".join(self.env_name(k) for k in kinds[1:])
            )
        for field in ("nkey_seed_file", "creds_file"):
            path: Path | None = getattr(self, field)
            if path is not None and not path.is_file():
                raise ValueError(f"{self.env_name(field)}: {path} is not a readable file")
        return self

    @property
    def tls_wanted(self) -> bool:
        """TLS on: asked for in the settings or by a ``tls://`` URL."""
        return self.tls_enabled or any(urlsplit(u).scheme == "tls" for u in self.servers)

    @property
    def servers(self) -> list[str]:
        return [u.strip() for u in self.url.split(",") if u.strip()]

    def for_cluster(self, cluster: str, addresses: tuple[str, ...]) -> NatsSettings:
        """These settings for one cluster of the cluster map: its addresses and name.
        The monitoring URLs are the settings' own cluster's, so they are dropped here: the
        fsync check runs where ``SHOAL_NATS_MONITOR_URL`` names that cluster's servers."""
        return self.model_copy(
            update={
                "url": ",".join(addresses),
                "cluster": cluster,
                "name": f"{self.name}@{cluster}",
                "monitor_url": None,
                "refuse_while_disconnected": True,
            }
        )

    @property
    def monitors(self) -> list[str]:
        return [u.strip() for u in (self.monitor_url or "").split(",") if u.strip()]
