"""Backend selection by configuration: ``SHOAL_COORDINATION`` and ``SHOAL_TRANSPORT``.

Providers are Factories of unentered adapters (async context managers); a service enters
what it uses with an ``AsyncExitStack``, so only the selected backend ever connects.
(dependency-injector's ``init_resources()`` would start every Resource, selected or not.)
"""

from __future__ import annotations

from dependency_injector import containers, providers

from adapters.etcd import EtcdAssignmentStore, EtcdElection, EtcdMembership, EtcdSettings
from adapters.nats import NatsSettings, NatsTransport


class Backends(containers.DeclarativeContainer):
    config = providers.Configuration(strict=True)

    etcd_settings = providers.Singleton(EtcdSettings, group=config.group)
    nats_settings = providers.Singleton(NatsSettings)

    membership = providers.Selector(
        config.coordination,
        etcd=providers.Factory(EtcdMembership, etcd_settings),
    )
    election = providers.Selector(
        config.coordination,
        etcd=providers.Factory(EtcdElection, etcd_settings),
    )
    assignment_store = providers.Selector(
        config.coordination,
        etcd=providers.Factory(EtcdAssignmentStore, etcd_settings),
    )
    transport = providers.Selector(
        config.transport,
        nats=providers.Factory(NatsTransport, nats_settings),
    )
