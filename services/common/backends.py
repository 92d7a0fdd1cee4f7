"""Backend selection by configuration: ``SHOAL_COORDINATION`` (etcd, redis, kafka, nats: JetStream
KV) and ``SHOAL_TRANSPORT`` (nats, kafka).

Providers are Factories of unentered adapters (async context managers); a service enters
what it uses with an ``AsyncExitStack``, so only the selected backend ever connects, and
only its package is ever imported (``deferred``).
(dependency-injector's ``init_resources()`` would start every Resource, selected or not.)
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dependency_injector import containers, providers
from pydantic_settings import BaseSettings

from core.ports import TransportFeatures
from services.common.settings import load_settings


def _imported(path: str) -> Any:
    """The object at ``path`` (``package:Name``), its package imported now."""
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


def deferred(path: str) -> Callable[..., Any]:
    """A factory of the class at ``path`` that imports its package on the first call: a
    process imports only the backends it selects (each brings its client library: grpc for
    etcd, aiokafka, redis-py, nats-py; 80 MB all together, 35 MB more than one pair)."""

    def make(*args: Any, **kwargs: Any) -> Any:
        return _imported(path)(*args, **kwargs)

    return make


TRANSPORTS: dict[str, str] = {
    "nats": "adapters.nats:NatsTransport",
    "kafka": "adapters.kafka:KafkaTransport",
}


def transport_features(transport: str) -> TransportFeatures:
    """What the transport ``transport`` (a ``SHOAL_TRANSPORT`` value) can do, as its adapter
    class declares it (its package is imported)."""
    features: TransportFeatures = _imported(TRANSPORTS[transport]).features
    return features


def deletes_acked_messages(transport: str, backends: Any) -> bool:
    """Whether the log that ``backends`` (a ``Backends`` container) configures drops a
    message once acked (a NATS work-queue stream, ``SHOAL_NATS_RETENTION=workqueue``),
    which no other position could then read."""
    return transport == "nats" and backends.nats_settings().retention == "workqueue"


@dataclass(frozen=True, slots=True)
class DatacenterBackends:
    """What a multi-datacenter process builds once per cluster of ``SHOAL_CLUSTERS``: the
    transport's settings class (its ``for_cluster(name, addresses)`` gives one cluster's),
    and the adapter classes built on them."""

    settings: Any
    transport: Any
    idempotency_store: Any
    dead_letter_queue: Any


_DATACENTER_CLASSES: dict[str, tuple[str, str, str, str]] = {
    "nats": (
        "adapters.nats:NatsSettings",
        "adapters.nats:NatsTransport",
        "adapters.nats:NatsIdempotencyStore",
        "adapters.nats:NatsDeadLetterQueue",
    ),
}


def datacenter_backends(transport: str) -> DatacenterBackends:
    """The per-cluster classes of ``transport``; ``ValueError`` saying why when the
    transport does not declare multi-datacenter routing (``TransportFeatures``)."""
    why = transport_features(transport).datacenters
    if why is not None:
        raise ValueError(
            f"multi-datacenter routing is not available on SHOAL_TRANSPORT={transport}: {why}"
        )
    return DatacenterBackends(*(_imported(path) for path in _DATACENTER_CLASSES[transport]))


@dataclass(frozen=True, slots=True)
class Store:
    """A coordination store written as a dialect of ``CoordinationStore``: the dialect, its
    settings (a ``StoreTiming``, built with the group) and the settings those compose
    (read first at start-up, so that a bad value is named by its own variable)."""

    dialect: str
    settings: str
    composes: tuple[str, ...] = ()


# A new store is one line here.
STORES: dict[str, Store] = {
    "etcd": Store("adapters.etcd:EtcdCoordinationStore", "adapters.etcd:EtcdSettings"),
    "redis": Store("adapters.redis:RedisCoordinationStore", "adapters.redis:RedisSettings"),
    "nats": Store(
        "adapters.natskv:NatsKvCoordinationStore",
        "adapters.natskv:NatsKvSettings",
        composes=("adapters.nats:NatsSettings",),
    ),
    "kafka": Store(
        "adapters.kafka:KafkaCoordinationStore",
        "adapters.kafka:KafkaKvSettings",
        composes=("adapters.kafka:KafkaSettings",),
    ),
}
COORDINATION_BACKENDS = tuple(STORES)


def _store_providers(
    config: providers.Configuration,
) -> tuple[providers.Selector[Any], providers.Selector[Any]]:
    """Selectors on ``SHOAL_COORDINATION`` of the store's dialect (a new one per call) and
    of its timing, for each store of ``STORES``."""
    dialects: dict[str, providers.Provider[Any]] = {}
    timings: dict[str, providers.Provider[Any]] = {}
    for name, store in STORES.items():
        settings = providers.Singleton(deferred(store.settings), group=config.group)
        dialects[name] = providers.Factory(deferred(store.dialect), settings)
        timings[name] = settings  # a store's settings carry its timing (StoreTiming)
    return (
        providers.Selector(config.coordination, **dialects),
        providers.Selector(config.coordination, **timings),
    )


def _port(
    port: str, store: providers.Provider[Any], timing: providers.Provider[Any]
) -> providers.Factory[Any]:
    """The coordination port ``port``: ``adapters.coordination``'s ``Store{port}`` over the
    selected store's dialect."""
    return providers.Factory(deferred(f"adapters.coordination:Store{port}"), store, timing)


class Backends(containers.DeclarativeContainer):
    config = providers.Configuration(strict=True)

    kafka_settings = providers.Singleton(
        deferred("adapters.kafka:KafkaSettings"), group=config.group, partitions=config.partitions
    )
    nats_settings = providers.Singleton(deferred("adapters.nats:NatsSettings"))
    # The coordination ports are written once (adapters.coordination) over the selected
    # store's dialect of the CoordinationStore port; each adapter gets a dialect instance
    # (its own connection).
    coordination_store, timing = _store_providers(config)
    membership = _port("Membership", coordination_store, timing)
    load_reports = _port("LoadReports", coordination_store, timing)
    election = _port("Election", coordination_store, timing)
    assignment_store = _port("AssignmentStore", coordination_store, timing)
    hold_store = _port("HoldStore", coordination_store, timing)
    project_registry = _port("ProjectRegistry", coordination_store, timing)
    transport = providers.Selector(
        config.transport,
        nats=providers.Factory(deferred(TRANSPORTS["nats"]), nats_settings),
        kafka=providers.Factory(deferred(TRANSPORTS["kafka"]), kafka_settings),
    )
    dead_letter_queue = providers.Selector(
        config.transport,
        nats=providers.Factory(deferred("adapters.nats:NatsDeadLetterQueue"), nats_settings),
        kafka=providers.Factory(deferred("adapters.kafka:KafkaDeadLetterQueue"), kafka_settings),
    )
    history = providers.Selector(
        config.transport,
        nats=providers.Factory(deferred("adapters.nats:NatsHistory"), nats_settings),
        kafka=providers.Factory(deferred("adapters.kafka:KafkaHistory"), kafka_settings),
    )
    # The gateways' Idempotency-Key records, on the transport's broker; the caller passes
    # ``window=`` (SHOAL_GATEWAY_IDEMPOTENCY_WINDOW). With SHOAL_CLUSTERS the gateway keeps
    # them in every cluster instead (services.common.clusters.enter_datacenters).
    idempotency_store = providers.Selector(
        config.transport,
        nats=providers.Factory(deferred("adapters.nats:NatsIdempotencyStore"), nats_settings),
        kafka=providers.Factory(deferred("adapters.kafka:KafkaIdempotencyStore"), kafka_settings),
    )


# The transports' settings.
BACKEND_SETTINGS: dict[str, str] = {
    "kafka": "adapters.kafka:KafkaSettings",
    "nats": "adapters.nats:NatsSettings",
}


def check_backend_settings(coordination: str, transport: str) -> None:
    """Read the chosen backends' settings once, before anything connects: a bad value (a
    half-configured credential, a TLS file that is not there) exits with status 2 and
    ``error: SHOAL_X_Y: ...`` instead of a traceback from inside the container."""
    store = STORES[coordination]
    read = (BACKEND_SETTINGS[transport], *store.composes, store.settings)
    for path in dict.fromkeys(read):
        load_settings(_settings_class(path))


def _settings_class(path: str) -> type[BaseSettings]:
    found = _imported(path)
    if not (isinstance(found, type) and issubclass(found, BaseSettings)):
        raise TypeError(f"{path} is not a settings class")
    return found
