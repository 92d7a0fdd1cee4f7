"""What the Kafka coordination adapters share: names, topics, the broker's session bounds,
a task group, change notification and a bounded exit.

Names for ``KafkaSettings.group`` = g:

- consumer group ``shoal.g.coord``: the sessions (members and leader candidates). Not
  ``shoal.g``: the Kafka transport commits its offsets under that group id from outside
  the group, which a group with live members refuses.
- topic ``shoal.g.coord`` (``partitions`` partitions): what the sessions subscribe to;
  its partitions stand for shoal's partitions and are assigned by ``ShoalAssignor``.
- topic ``shoal.g.coord-log`` (1 partition, kept forever): the coordination log (leader
  terms, assignments, holds, projects), see ``_coord_log``.
- topic ``shoal.g.stats`` (1 partition, compacted): members' latest load reports by
  member id (``KafkaLoadReports``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import anyio
from anyio.abc import TaskGroup

from adapters._lifecycle import Lifecycle
from adapters.kafka._aiokafka import AIOKafkaAdminClient, KafkaError, NewTopic, for_code
from adapters.kafka._coord_aiokafka import ConfigResource, ConfigResourceType
from adapters.kafka._login import check_login, reaching
from adapters.kafka._settings import KafkaSettings
from core.errors import StoreUnavailableError

__all__ = [
    "Changes",
    "CoordNames",
    "KafkaCoordinationAdapter",
    "SessionBounds",
    "read_session_bounds",
]

_log = logging.getLogger("shoal.adapters.kafka.coord")
_TOPIC_ALREADY_EXISTS = 36
_DEFAULT_MIN_SESSION = 6.0  # Kafka's group.min.session.timeout.ms default
_DEFAULT_MAX_SESSION = 1800.0
_MAX_HEARTBEAT = 1.0


@dataclass(frozen=True, slots=True)
class CoordNames:
    group_id: str
    coord_topic: str
    log_topic: str
    stats_topic: str

    @staticmethod
    def of(settings: KafkaSettings) -> CoordNames:
        base = f"shoal.{settings.group}"
        return CoordNames(
            group_id=f"{base}.coord",
            coord_topic=f"{base}.coord",
            log_topic=f"{base}.coord-log",
            stats_topic=f"{base}.stats",
        )


@dataclass(frozen=True, slots=True)
class SessionBounds:
    """The broker's group.min/max.session.timeout.ms, in seconds."""

    minimum: float = _DEFAULT_MIN_SESSION
    maximum: float = _DEFAULT_MAX_SESSION

    def clamp(self, ttl: float) -> float:
        return min(max(ttl, self.minimum), self.maximum)


async def read_session_bounds(admin: Any) -> SessionBounds:
    """The broker's session timeout bounds (Kafka's defaults when they cannot be read)."""
    keys = {"group.min.session.timeout.ms": None, "group.max.session.timeout.ms": None}
    try:
        node = admin._client.get_random_node()  # one broker's view suffices
        responses = await admin.describe_configs(
            [ConfigResource(ConfigResourceType.BROKER, str(node), configs=keys)]
        )
        found: dict[str, float] = {}
        for response in responses:
            for resource in response.resources:
                for entry in resource[4]:
                    if entry[0] in keys and entry[1] is not None:
                        found[str(entry[0])] = int(entry[1]) / 1000
    except (KafkaError, OSError, ValueError, TypeError, IndexError) as exc:
        _log.info("cannot read the broker's session timeout bounds (%r): assuming 6-1800 s", exc)
        return SessionBounds()
    return SessionBounds(
        minimum=found.get("group.min.session.timeout.ms", _DEFAULT_MIN_SESSION),
        maximum=found.get("group.max.session.timeout.ms", _DEFAULT_MAX_SESSION),
    )


class Changes:
    """A change counter to wait on: take ``event()`` *before* reading, wait on it after."""

    def __init__(self) -> None:
        self._event = anyio.Event()

    def event(self) -> anyio.Event:
        return self._event

    def notify(self) -> None:
        self._event.set()
        self._event = anyio.Event()


class KafkaCoordinationAdapter(Lifecycle):
    """Base of the Kafka coordination adapters: ``async with`` creates the topics (if
    missing), reads the broker's session bounds and starts the adapter's own background
    work in its own task group; leaving stops it within ``settings.close_timeout``."""

    def __init__(
        self,
        settings: KafkaSettings | None = None,
        *,
        observe_interval: float = 0.5,
    ) -> None:
        self.settings = settings if settings is not None else KafkaSettings()
        self.names = CoordNames.of(self.settings)
        self.observe_interval = observe_interval
        self.bounds = SessionBounds()
        self.changes = Changes()
        self._admin: Any = None

    async def _connect(self) -> None:
        s = self.settings
        try:
            with reaching(s, "Kafka coordination", StoreUnavailableError):
                await check_login(s)
                self._admin = AIOKafkaAdminClient(
                    client_id=f"{s.client_id}-coord-admin", **s.client_options()
                )
                await self._admin.start()
                await self._ensure_topics()
                self.bounds = await read_session_bounds(self._admin)
                await self._open()
        except PermissionError as exc:
            raise StoreUnavailableError(str(exc)) from exc

    async def _wind_down(self) -> None:
        with anyio.move_on_after(self.settings.close_timeout):
            await self._close()

    async def _disconnect(self) -> None:
        admin, self._admin = self._admin, None
        if admin is not None:
            with anyio.move_on_after(self.settings.close_timeout):
                await admin.close()

    async def _open(self) -> None:
        """Start what the adapter owns (subclasses); runs inside ``connect_timeout``."""

    async def _close(self) -> None:
        """Stop what the adapter owns (subclasses); runs inside ``close_timeout``."""

    @property
    def tasks(self) -> TaskGroup:
        return self._tasks

    @property
    def admin(self) -> Any:
        if self._admin is None:
            raise StoreUnavailableError(f"{type(self).__name__} is not open")
        return self._admin

    # --- setup -------------------------------------------------------------------------------

    async def _ensure_topics(self) -> None:
        s, n = self.settings, self.names
        if not s.create_topics:
            return
        isr = {"min.insync.replicas": str(s.min_insync_replicas)}
        wanted = [
            NewTopic(n.coord_topic, s.partitions, s.replication_factor, topic_configs=isr),
            NewTopic(
                n.log_topic,
                1,
                s.replication_factor,
                topic_configs={
                    **isr,
                    "cleanup.policy": "delete",
                    "retention.ms": "-1",
                    "retention.bytes": "-1",
                },
            ),
            NewTopic(
                n.stats_topic,
                1,
                s.replication_factor,
                topic_configs={**isr, "cleanup.policy": "compact"},
            ),
        ]
        response = await self.admin.create_topics(wanted, timeout_ms=s.ms(s.request_timeout))
        for item in response.topic_errors:
            name, code = item[0], int(item[1])
            if code == 0:
                _log.info("created topic %s", name)
            elif code != _TOPIC_ALREADY_EXISTS:
                message = item[2] if len(item) > 2 else None
                raise for_code(code)(f"cannot create topic {name}: {message}")

    def session_timeout(self, ttl: float) -> float:
        """The session timeout for a lease of ``ttl`` seconds, within the broker's bounds.

        A TTL below the broker's minimum still loses the lease locally at its deadline;
        the broker then drops the session only after the minimum."""
        timeout = self.bounds.clamp(ttl)
        if timeout != ttl:
            _log.info(
                "lease TTL %g s is outside the broker's session bounds %g-%g s; the broker "
                "expires the session after %g s (the lease is still lost locally at %g s)",
                ttl,
                self.bounds.minimum,
                self.bounds.maximum,
                timeout,
                ttl,
            )
        return timeout

    def heartbeat_interval(self, ttl: float) -> float:
        """Members learn of a rebalance from their next heartbeat, so this bounds how long a
        join, a leave or a failover takes: at most 1 s, a third of the TTL, and never more
        than ``settings.heartbeat_interval``."""
        return min(ttl / 3, self.settings.heartbeat_interval, _MAX_HEARTBEAT)
