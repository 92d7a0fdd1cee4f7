"""etcd (>= 3.4.22, not 3.5.0-3.5.2) through ``etcd3aio``: ``EtcdCoordinationStore``, the
``CoordinationStore`` port in etcd's own terms (transactions, leases, a watch resumed by
revision), under ``/shoal/{group}/kv/``. The coordination ports over it are
``adapters.coordination``'s."""

from adapters.etcd._kv import EtcdCoordinationStore
from adapters.etcd._settings import EtcdSettings

__all__ = ["EtcdCoordinationStore", "EtcdSettings"]
