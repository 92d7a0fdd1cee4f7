"""``GroupSession``: one member of the coordination consumer group, on its own connection.

The classic group protocol, spoken directly with aiokafka's request builders (JoinGroup,
SyncGroup, Heartbeat, LeaveGroup) instead of through ``AIOKafkaConsumer``, because a
session is a *lease* and the lease contract needs what the consumer keeps private: the
time of the last heartbeat the broker accepted (the local deadline), a way to tell an
eviction (``UNKNOWN_MEMBER_ID``: the broker expired or removed us) from a rebalance, and
no fetching at all (a consumer that is not polled leaves its group after
``max.poll.interval.ms``). The protocol is the consumer protocol with exactly one
assignor, ``shoal`` (``ShoalAssignor``), so Kafka's tools show the group as usual.

Lease rules (``core.lease.LeaseDeadline``, the rule every store's lease keeps):
- The deadline is the send time of the last request the broker answered *as to a current
  member* (Heartbeat, JoinGroup and SyncGroup without error) plus the session timeout: the
  broker cannot have expired the session before it. ``is_lost`` compares the monotonic
  clock with it, without I/O.
- Nothing else moves it: not a REBALANCE_IN_PROGRESS or ILLEGAL_GENERATION answer (the
  broker drops a member that does not rejoin within the rebalance timeout, whatever it
  heartbeats), and not a JoinGroup in flight (it may never have reached the broker). So a
  member paused in the middle of a rebalance loses its lease locally no later than the
  broker can give its partitions away; a rebalance that outlasts the lease (a member died
  during it) costs a local loss and a rejoin, never two holders.
- ``UNKNOWN_MEMBER_ID`` after the first sync, or no successful heartbeat before the
  deadline, loses the lease for good: the session stops (a new lease is a new session,
  with a new incarnation) and, unless paused, sends LeaveGroup so others rebalance now.
- Every connection needs its own session: the broker answers one request per connection
  at a time, and a JoinGroup may wait seconds for the other members.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from typing import Any

import anyio
from anyio.abc import TaskStatus

from adapters.kafka._aiokafka import KafkaError
from adapters.kafka._assignor import ShoalAssignor
from adapters.kafka._coord_aiokafka import (
    AIOKafkaClient,
    ConnectionGroup,
    ConsumerProtocol,
    ConsumerProtocolMemberMetadata,
    CoordinationType,
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    SyncGroupRequest,
)
from adapters.kafka._coord_codec import Broadcast
from adapters.kafka._settings import KafkaSettings
from core.errors import StoreUnavailableError
from core.lease import LeaseDeadline

__all__ = ["GroupSession"]

_log = logging.getLogger("shoal.adapters.kafka.group")

# Kafka error codes the session handles (org.apache.kafka.common.protocol.Errors)
_COORDINATOR_LOADING = 14
_COORDINATOR_NOT_AVAILABLE = 15
_NOT_COORDINATOR = 16
_ILLEGAL_GENERATION = 22
_UNKNOWN_MEMBER_ID = 25
_INVALID_SESSION_TIMEOUT = 26
_REBALANCE_IN_PROGRESS = 27
_MEMBER_ID_REQUIRED = 79
_COORDINATOR_ERRORS = {_COORDINATOR_LOADING, _COORDINATOR_NOT_AVAILABLE, _NOT_COORDINATOR}

_CLIENT_REQUEST_TIMEOUT_MS = 600_000  # a JoinGroup may wait long; every call has its own bound


class _Evicted(Exception):
    """The broker no longer knows this member: the lease is gone."""


class _Retry(Exception):
    """Try again after a backoff (coordinator moved, connection lost, broker starting)."""


class GroupSession:
    """One session of ``group_id``. Run ``run`` in a task group (``start`` waits until the
    client is bootstrapped); ``wait_synced`` waits for the first completed rebalance.

    ``on_change(session)`` is called (synchronously) after every completed rebalance and
    when the lease is lost.
    """

    def __init__(
        self,
        *,
        settings: KafkaSettings,
        group_id: str,
        assignor: ShoalAssignor,
        session_timeout: float,
        heartbeat_interval: float,
        lease_ttl: float | None = None,
        rebalance_timeout: float | None = None,
        on_change: Callable[[GroupSession], None] = lambda _session: None,
    ) -> None:
        if not (session_timeout > 0 and math.isfinite(session_timeout)):
            raise ValueError(f"session timeout must be a positive number, got {session_timeout!r}")
        self.settings = settings
        self.group_id = group_id
        self.assignor = assignor
        self.session_timeout = session_timeout
        # the local deadline: never later than the broker's, earlier if the lease asks it
        self.lease_ttl = min(lease_ttl or session_timeout, session_timeout)
        self.heartbeat_interval = min(heartbeat_interval, self.lease_ttl / 3)
        self.rebalance_timeout = rebalance_timeout or session_timeout
        self._on_change = on_change
        self.kafka_member_id = ""
        self.generation = -1
        self.broadcast: Broadcast | None = None
        self.broadcast_at = 0.0
        self.deposed_term: int | None = None  # set when this session's assign() deposed one
        self.lost_reason = ""
        self._deadline = LeaseDeadline(self.lease_ttl, 0.0)
        self._lost = anyio.Event()
        self._synced = anyio.Event()
        self._wake = anyio.Event()
        self._rejoin = False
        self._paused = False
        self._leaving = False
        self._done = anyio.Event()
        self._scope: anyio.CancelScope | None = None
        self._coordinator: int | None = None

    # --- the lease ---------------------------------------------------------------------------

    @property
    def deadline(self) -> float:
        return self._deadline.at

    def is_lost(self, margin: float = 0.0) -> bool:
        return self._lost.is_set() or self._expired(time.monotonic(), margin)

    def _expired(self, now: float, margin: float = 0.0) -> bool:
        """Past the deadline, once synced: before the first sync there is no lease to lose."""
        return self._synced.is_set() and self._deadline.passed(now, margin)

    async def wait_lost(self) -> None:
        await self._lost.wait()

    async def wait_synced(self) -> None:
        """Return after the first completed rebalance (raises nothing; check ``is_lost``)."""
        async with anyio.create_task_group() as tasks:

            async def on_lost() -> None:
                await self._lost.wait()
                tasks.cancel_scope.cancel()

            tasks.start_soon(on_lost)
            await self._synced.wait()
            tasks.cancel_scope.cancel()

    def request_rejoin(self) -> None:
        """Rejoin now (the metadata changed): every member of the group rebalances."""
        self._rejoin = True
        self._poke()

    def pause(self) -> None:
        """Fault injection for tests: stop renewing, as a paused (SIGSTOP) process would."""
        self._paused = True
        self._poke()

    async def leave(self) -> None:
        """Leave the group now (others rebalance at once) and stop. Idempotent; bounded."""
        self._leaving = True
        self._lose("left the group")
        if self._scope is not None:
            self._scope.cancel()
        with anyio.move_on_after(self.settings.close_timeout, shield=True):
            await self._done.wait()

    def _poke(self) -> None:
        self._wake.set()

    def _lose(self, reason: str) -> None:
        if not self._lost.is_set():
            self.lost_reason = reason
            self._lost.set()
            level = logging.INFO if self._leaving else logging.WARNING
            _log.log(
                level,
                "group %s: session of %s (%s) lost: %s",
                self.group_id,
                self.assignor.member_id,
                self.kafka_member_id or "not joined",
                reason,
            )
            self._on_change(self)

    # --- the protocol ------------------------------------------------------------------------

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Bootstrap, then join and heartbeat until lost, left or cancelled.

        Raises ``StoreUnavailableError`` (before ``started``) when no broker answers
        within ``connect_timeout``."""
        s = self.settings
        client = AIOKafkaClient(
            **{**s.client_options(), "request_timeout_ms": _CLIENT_REQUEST_TIMEOUT_MS},
            client_id=f"{s.client_id}-coord",
        )
        try:
            try:
                with anyio.fail_after(s.connect_timeout):
                    await client.bootstrap()
                    client.add_topic(self.assignor.topic)
            except (TimeoutError, KafkaError, OSError) as exc:
                raise StoreUnavailableError(
                    f"Kafka at {s.bootstrap} did not answer within {s.connect_timeout:g} s: {exc!r}"
                ) from exc
            task_status.started()
            with anyio.CancelScope() as self._scope:
                if not self._lost.is_set():
                    await self._serve(client)
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(s.close_timeout):
                if self.kafka_member_id and not self._paused and self._leaving_allowed():
                    await self._send_leave(client)
                await client.close()
            if not self._lost.is_set():
                self._leaving = True  # closed with its adapter: a normal end
            self._lose("session closed")
            self._done.set()

    def _leaving_allowed(self) -> bool:
        # after an eviction the broker has already dropped us
        return not self.lost_reason.startswith("evicted")

    async def _serve(self, client: Any) -> None:
        need_join = True
        backoff = self.settings.retry_backoff
        while not self._lost.is_set():
            if self._paused:
                await self._expire_paused()
                return
            try:
                if self._coordinator is None:
                    self._coordinator = await self._find_coordinator(client)
                if need_join or self._rejoin:
                    self._rejoin = False
                    need_join = True
                    await self._join(client)
                    need_join = False
                    backoff = self.settings.retry_backoff
                else:
                    need_join = await self._heartbeat(client)
            except _Evicted as exc:
                self._lose(f"evicted: {exc}")
                return
            except (_Retry, Exception) as exc:
                level = logging.DEBUG if isinstance(exc, _Retry) else logging.WARNING
                _log.log(level, "group %s: retrying: %r", self.group_id, exc)
                self._check_deadline()
                with anyio.move_on_after(backoff):
                    await self._wait_wake()
                backoff = min(
                    backoff * 2, max(self.heartbeat_interval, self.settings.retry_backoff)
                )
            self._check_deadline()

    def _check_deadline(self) -> None:
        if self._expired(time.monotonic()):
            self._lose(f"no heartbeat accepted within its {self.lease_ttl:g} s TTL")

    async def _expire_paused(self) -> None:
        await anyio.sleep(max(0.0, self._deadline.at - time.monotonic()))
        self._lose(f"not renewed within its {self.lease_ttl:g} s TTL (paused)")

    async def _wait_wake(self) -> None:
        await self._wake.wait()
        self._wake = anyio.Event()

    async def _call(self, client: Any, request: Any, bound: float) -> Any:
        """Send ``request`` to the coordinator within ``bound`` seconds."""
        node = self._coordinator
        if node is None:
            raise _Retry("coordinator unknown")
        try:
            with anyio.fail_after(max(bound, 0.001)):
                return await client.send(node, request, group=ConnectionGroup.COORDINATION)
        except TimeoutError as exc:
            raise _Retry(f"{type(request).__name__} unanswered within {bound:g} s") from exc
        except (KafkaError, OSError) as exc:
            self._coordinator = None
            raise _Retry(f"{type(request).__name__}: {exc!r}") from exc

    def _check_code(self, code: int, what: str) -> None:
        if code in _COORDINATOR_ERRORS:
            self._coordinator = None
            raise _Retry(f"{what}: coordinator error {code}")

    async def _find_coordinator(self, client: Any) -> int:
        try:
            with anyio.fail_after(self.settings.request_timeout):
                node = await client.coordinator_lookup(CoordinationType.GROUP, self.group_id)
                if not await client.ready(node, group=ConnectionGroup.COORDINATION):
                    raise _Retry(f"coordinator {node} not reachable")
                return int(node)
        except TimeoutError as exc:
            raise _Retry("FindCoordinator unanswered") from exc
        except (KafkaError, OSError) as exc:
            raise _Retry(f"FindCoordinator: {exc!r}") from exc

    async def _heartbeat(self, client: Any) -> bool:
        """Wait one interval, heartbeat; True when a rejoin is needed."""
        wait = min(self.heartbeat_interval, max(0.0, self._deadline.at - time.monotonic()))
        with anyio.move_on_after(wait):
            await self._wait_wake()
        if self._rejoin or self._paused or self._lost.is_set():
            return self._rejoin
        sent = time.monotonic()
        bound = min(self.settings.request_timeout, max(self._deadline.at - sent, 0.001))
        request = HeartbeatRequest(self.group_id, self.generation, self.kafka_member_id)
        response = await self._call(client, request, bound)
        code = int(response.error_code)
        if code == 0:
            self._deadline = self._deadline.renewed(sent)
            return False
        if code in (_REBALANCE_IN_PROGRESS, _ILLEGAL_GENERATION):
            return True  # rejoin now; no renewal (see the module docstring)
        if code == _UNKNOWN_MEMBER_ID:
            raise _Evicted("the broker does not know this member any more (heartbeat)")
        self._check_code(code, "Heartbeat")
        raise _Retry(f"Heartbeat error {code}")

    async def _join(self, client: Any) -> None:
        assignor = self.assignor
        metadata = assignor.metadata([assignor.topic])
        protocols = [(assignor.name, metadata.encode())]
        join_bound = self.rebalance_timeout + self.settings.request_timeout
        while True:
            join_sent = time.monotonic()
            request = JoinGroupRequest(
                self.group_id,
                self.settings.ms(self.session_timeout),
                self.settings.ms(self.rebalance_timeout),
                self.kafka_member_id,
                None,
                ConsumerProtocol.PROTOCOL_TYPE,
                protocols,
            )
            response = await self._call(client, request, join_bound)
            code = int(response.error_code)
            if code == _MEMBER_ID_REQUIRED:
                self.kafka_member_id = str(response.member_id)
                continue
            if code == _UNKNOWN_MEMBER_ID:
                if self._synced.is_set():
                    raise _Evicted("the broker does not know this member any more (join)")
                self.kafka_member_id = ""
                raise _Retry("JoinGroup: unknown member id")
            if code == _INVALID_SESSION_TIMEOUT:
                self._lose(
                    f"the broker refused a {self.session_timeout:g} s session timeout "
                    "(outside group.min/max.session.timeout.ms)"
                )
                raise _Retry("JoinGroup: invalid session timeout")
            self._check_code(code, "JoinGroup")
            if code != 0:
                raise _Retry(f"JoinGroup error {code}")
            break
        self._deadline = self._deadline.renewed(join_sent)
        self.kafka_member_id = str(response.member_id)
        self.generation = int(response.generation_id)
        self.deposed_term = None
        assignments: list[tuple[str, bytes]] = []
        if response.leader_id == response.member_id:
            assignments = self._assign(client, response)
        sent = time.monotonic()
        sync = SyncGroupRequest(
            self.group_id, self.generation, self.kafka_member_id, None, assignments
        )
        answer = await self._call(client, sync, self.settings.request_timeout)
        code = int(answer.error_code)
        if code in (_REBALANCE_IN_PROGRESS, _ILLEGAL_GENERATION):
            self._rejoin = True
            raise _Retry(f"SyncGroup error {code}: rejoining")
        if code == _UNKNOWN_MEMBER_ID:
            raise _Evicted("the broker does not know this member any more (sync)")
        self._check_code(code, "SyncGroup")
        if code != 0:
            raise _Retry(f"SyncGroup error {code}")
        self._deadline = self._deadline.renewed(sent)
        assignment = ConsumerProtocol.ASSIGNMENT.decode(bytes(answer.member_assignment))
        try:
            assignor.on_assignment(assignment)
        except ValueError as exc:
            raise _Retry(f"undecodable assignment: {exc}") from exc
        self.broadcast = assignor.last
        self.broadcast_at = time.monotonic()
        self._synced.set()
        _log.debug(
            "group %s: generation %d synced for %s (%s)",
            self.group_id,
            self.generation,
            assignor.member_id,
            self.kafka_member_id,
        )
        self._on_change(self)

    def _assign(self, client: Any, response: Any) -> list[tuple[str, bytes]]:
        members: dict[str, Any] = {}
        for member in response.members:
            member_id, metadata_bytes = member[0], member[-1]
            members[str(member_id)] = ConsumerProtocolMemberMetadata.decode(bytes(metadata_bytes))
        self.assignor.generation = self.generation
        self.assignor.kafka_member_id = self.kafka_member_id
        result = self.assignor.assign(client.cluster, members)
        self.deposed_term = self.assignor.deposed_term
        return [(kid, a.encode()) for kid, a in result.items()]

    async def _send_leave(self, client: Any) -> None:
        try:
            if self._coordinator is None:
                self._coordinator = await self._find_coordinator(client)
            request = LeaveGroupRequest(self.group_id, self.kafka_member_id)
            await self._call(client, request, self.settings.request_timeout)
        except (_Retry, KafkaError, OSError) as exc:
            _log.info("group %s: LeaveGroup not confirmed: %s", self.group_id, exc)
