"""Backend selection by configuration: ``SHOAL_COORDINATION`` (etcd, redis, kafka, nats: JetStream
KV) and ``SHOAL_TRANSPORT`` (nats, kafka).

Providers are Factories of unentered adapters (async context managers); a service enters
what it uses with an ``AsyncExitStack``, so only the selected backend ever connects.
(dependency-injector's ``init_resources()`` would start every Resource, selected or not.)
"""

from __future__ import annotations

from dependency_injector import containers, providers
from pydantic_settings import BaseSettings

from adapters.etcd import (
    EtcdAssignmentStore,
    EtcdElection,
    EtcdHoldStore,
    EtcdLoadReports,
    EtcdMembership,
    EtcdProjectRegistry,
    EtcdSettings,
)
from adapters.kafka import (
    KafkaAssignmentStore,
    KafkaDeadLetterQueue,
    KafkaElection,
    KafkaHistory,
    KafkaHoldStore,
    KafkaIdempotencyStore,
    KafkaLoadReports,
    KafkaMembership,
    KafkaProjectRegistry,
    KafkaSettings,
    KafkaTransport,
)
from adapters.nats import (
    NatsDeadLetterQueue,
    NatsHistory,
    NatsIdempotencyStore,
    NatsSettings,
    NatsTransport,
)
from adapters.natskv import (
    NatsKvAssignmentStore,
    NatsKvElection,
    NatsKvHoldStore,
    NatsKvLoadReports,
    NatsKvMembership,
    NatsKvProjectRegistry,
    NatsKvSettings,
)
from adapters.redis import (
    RedisAssignmentStore,
    RedisElection,
    RedisHoldStore,
    RedisLoadReports,
    RedisMembership,
    RedisProjectRegistry,
    RedisSettings,
)
from services.common.settings import load_settings


class Backends(containers.DeclarativeContainer):
    config = providers.Configuration(strict=True)

    etcd_settings = providers.Singleton(EtcdSettings, group=config.group)
    redis_settings = providers.Singleton(RedisSettings, group=config.group)
    kafka_settings = providers.Singleton(
        KafkaSettings, group=config.group, partitions=config.partitions
    )
    nats_settings = providers.Singleton(NatsSettings)
    # coordination on NATS KV: the transport's connection settings, a bucket per group
    natskv_settings = providers.Singleton(NatsKvSettings, group=config.group, nats=nats_settings)

    membership = providers.Selector(
        config.coordination,
        etcd=providers.Factory(EtcdMembership, etcd_settings),
        redis=providers.Factory(RedisMembership, redis_settings),
        kafka=providers.Factory(KafkaMembership, kafka_settings, strategy=config.strategy),
        nats=providers.Factory(NatsKvMembership, natskv_settings),
    )
    load_reports = providers.Selector(
        config.coordination,
        etcd=providers.Factory(EtcdLoadReports, etcd_settings),
        redis=providers.Factory(RedisLoadReports, redis_settings),
        kafka=providers.Factory(KafkaLoadReports, kafka_settings),
        nats=providers.Factory(NatsKvLoadReports, natskv_settings),
    )
    election = providers.Selector(
        config.coordination,
        etcd=providers.Factory(EtcdElection, etcd_settings),
        redis=providers.Factory(RedisElection, redis_settings),
        kafka=providers.Factory(KafkaElection, kafka_settings, strategy=config.strategy),
        nats=providers.Factory(NatsKvElection, natskv_settings),
    )
    assignment_store = providers.Selector(
        config.coordination,
        etcd=providers.Factory(EtcdAssignmentStore, etcd_settings),
        redis=providers.Factory(RedisAssignmentStore, redis_settings),
        kafka=providers.Factory(KafkaAssignmentStore, kafka_settings),
        nats=providers.Factory(NatsKvAssignmentStore, natskv_settings),
    )
    hold_store = providers.Selector(
        config.coordination,
        etcd=providers.Factory(EtcdHoldStore, etcd_settings),
        redis=providers.Factory(RedisHoldStore, redis_settings),
        kafka=providers.Factory(KafkaHoldStore, kafka_settings),
        nats=providers.Factory(NatsKvHoldStore, natskv_settings),
    )
    project_registry = providers.Selector(
        config.coordination,
        etcd=providers.Factory(EtcdProjectRegistry, etcd_settings),
        redis=providers.Factory(RedisProjectRegistry, redis_settings),
        kafka=providers.Factory(KafkaProjectRegistry, kafka_settings),
        nats=providers.Factory(NatsKvProjectRegistry, natskv_settings),
    )
    transport = providers.Selector(
        config.transport,
        nats=providers.Factory(NatsTransport, nats_settings),
        kafka=providers.Factory(KafkaTransport, kafka_settings),
    )
    dead_letter_queue = providers.Selector(
        config.transport,
        nats=providers.Factory(NatsDeadLetterQueue, nats_settings),
        kafka=providers.Factory(KafkaDeadLetterQueue, kafka_settings),
    )
    history = providers.Selector(
        config.transport,
        nats=providers.Factory(NatsHistory, nats_settings),
        kafka=providers.Factory(KafkaHistory, kafka_settings),
    )
    # The gateways' Idempotency-Key records, on the transport's broker; the caller passes
    # ``window=`` (SHOAL_GATEWAY_IDEMPOTENCY_WINDOW).
    idempotency_store = providers.Selector(
        config.transport,
        nats=providers.Factory(NatsIdempotencyStore, nats_settings),
        kafka=providers.Factory(KafkaIdempotencyStore, kafka_settings),
    )


BACKEND_SETTINGS: dict[str, type[BaseSettings]] = {
    "etcd": EtcdSettings,
    "redis": RedisSettings,
    "kafka": KafkaSettings,
    "nats": NatsSettings,
}
# What a coordination backend reads besides its connection settings above (read after them,
# so a bad SHOAL_NATS_* is named as such).
COORDINATION_SETTINGS: dict[str, type[BaseSettings]] = {"nats": NatsKvSettings}


def check_backend_settings(coordination: str, transport: str) -> None:
    """Read the chosen backends' settings once, before anything connects: a bad value (a
    half-configured credential, a TLS file that is not there) exits with status 2 and
    ``error: SHOAL_X_Y: ...`` instead of a traceback from inside the container."""
    for name in dict.fromkeys((coordination, transport)):
        load_settings(BACKEND_SETTINGS[name])
    if coordination in COORDINATION_SETTINGS:
        load_settings(COORDINATION_SETTINGS[coordination])
