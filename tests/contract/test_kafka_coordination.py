"""The coordination contract suites against Kafka (the ``kafka_server`` fixture).

Each test gets its own coordination group (``shoal.t-<uuid>.coord``) and topics, removed
afterwards. Leases expire on the broker's side through LeaveGroup sent for the lease's
Kafka member id from another connection (what the broker does itself when a session
times out, without the wait).

Restarts: the suites' two restart checks hold a 10 s lease across ``restart_store``, and
the local broker takes 8.5-10 s to restart on the 2-core machine (SIGTERM + JVM start,
or kill + start), so those leases are lost *by design* (no renewal for a whole TTL; the
contract requires the loss). ``restartable`` is therefore off, and ``TestKafkaRestart``
runs the same two checks with leases that outlive a restart.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import AsyncIterator

import anyio
import pytest

from adapters.kafka import (
    KafkaAssignmentStore,
    KafkaElection,
    KafkaHoldStore,
    KafkaLeadership,
    KafkaLoadReports,
    KafkaMembership,
    KafkaMembershipLease,
    KafkaProjectRegistry,
    KafkaSettings,
)
from adapters.kafka._aiokafka import AIOKafkaAdminClient, KafkaError
from adapters.kafka._coord_aiokafka import (
    AIOKafkaClient,
    ConnectionGroup,
    CoordinationType,
    LeaveGroupRequest,
)
from adapters.kafka._coord_base import CoordNames, read_session_bounds
from core.ports import Leadership, MembershipLease
from infra.local._testservers import ServerInfo
from tests.contract._coordination import (
    SHORT_TTL,
    AssignmentStoreContract,
    CoordinationModelContract,
    ElectionContract,
    Features,
    HoldStoreContract,
    LoadReportsContract,
    MembershipContract,
    ProjectRegistryContract,
    next_within,
    owners,
    retry_while_unavailable,
    until,
    watching,
)

HEARTBEAT = 0.3  # seconds; rebalances start within one heartbeat
RESTART_TTL = 30.0  # outlives a broker restart


class KafkaHarness:
    """Adapters on a fresh coordination group of the session's broker."""

    def __init__(self, server: ServerInfo, min_session: float) -> None:
        self._server = server
        self.settings = KafkaSettings(
            bootstrap_servers=tuple(server.endpoint.split(",")),
            group=f"t-{uuid.uuid4().hex[:12]}",
            heartbeat_interval=HEARTBEAT,
            partitions=8,
            request_timeout=5.0,
            connect_timeout=10.0,
        )
        self.names = CoordNames.of(self.settings)
        # A session shorter than the broker's group.min.session.timeout.ms is stretched to
        # it (the lease is still lost locally at its TTL); the broker drops it after that.
        slack = max(0.0, min_session - SHORT_TTL) + 1.5
        self.restartable = server.process is not None
        self.features = Features(restartable=False, expiry_slack=slack)

    def membership(self) -> KafkaMembership:
        return KafkaMembership(self.settings)

    def reports(self) -> KafkaLoadReports:
        return KafkaLoadReports(self.settings)

    def election(self) -> KafkaElection:
        return KafkaElection(self.settings)

    def store(self) -> KafkaAssignmentStore:
        return KafkaAssignmentStore(self.settings)

    def hold_store(self) -> KafkaHoldStore:
        return KafkaHoldStore(self.settings)

    def registry(self) -> KafkaProjectRegistry:
        return KafkaProjectRegistry(self.settings)

    async def expire(self, lease: MembershipLease | Leadership) -> None:
        assert isinstance(lease, KafkaMembershipLease | KafkaLeadership)
        client = AIOKafkaClient(bootstrap_servers=self._server.endpoint)
        try:
            with anyio.fail_after(10):
                await client.bootstrap()
                node = await client.coordinator_lookup(CoordinationType.GROUP, self.names.group_id)
                request = LeaveGroupRequest(self.names.group_id, lease.kafka_member_id)
                response = await client.send(node, request, group=ConnectionGroup.COORDINATION)
                assert response.error_code == 0, response
        finally:
            await client.close()

    def pause_renewal(self, lease: MembershipLease | Leadership) -> None:
        assert isinstance(lease, KafkaMembershipLease | KafkaLeadership)
        lease.pause_renewal()

    async def restart_store(self) -> None:
        assert self._server.process is not None
        await anyio.to_thread.run_sync(self._server.process.restart)

    async def clean(self, admin: object) -> None:
        n = self.names
        await admin.delete_topics([n.coord_topic, n.log_topic, n.stats_topic])  # type: ignore[attr-defined]


_bounds: list[float] = []  # the broker's group.min.session.timeout.ms, read once


async def _min_session(admin: object) -> float:
    if not _bounds:
        _bounds.append((await read_session_bounds(admin)).minimum)
    return _bounds[0]


@pytest.fixture
async def harness(kafka_server: ServerInfo) -> AsyncIterator[KafkaHarness]:
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_server.endpoint)
    await admin.start()
    try:
        harness = KafkaHarness(kafka_server, await _min_session(admin))
        yield harness
        with contextlib.suppress(KafkaError, TimeoutError), anyio.fail_after(10):
            await harness.clean(admin)  # the broker may still be restarting
    finally:
        await admin.close()


@pytest.mark.kafka
class TestKafkaMembership(MembershipContract):
    pass


@pytest.mark.kafka
class TestKafkaLoadReports(LoadReportsContract):
    pass


@pytest.mark.kafka
class TestKafkaElection(ElectionContract):
    pass


@pytest.mark.kafka
class TestKafkaAssignmentStore(AssignmentStoreContract):
    pass


@pytest.mark.kafka
class TestKafkaHoldStore(HoldStoreContract):
    pass


@pytest.mark.kafka
class TestKafkaProjectRegistry(ProjectRegistryContract):
    pass


@pytest.mark.kafka
class TestKafkaAgainstTheModel(CoordinationModelContract):
    pass


@pytest.mark.kafka
@pytest.mark.anyio
class TestKafkaRestart:
    """The suites' ``test_watch_resumes_when_store_restarts``, with 30 s leases."""

    async def test_member_watch_resumes_when_the_broker_restarts(
        self, harness: KafkaHarness
    ) -> None:
        if not harness.restartable:
            pytest.skip("the harness cannot restart this broker")
        async with (
            harness.membership() as observer,
            harness.membership() as membership,
            watching(observer.watch()) as updates,
        ):
            assert await next_within(updates) == set()
            a = await membership.join("a", RESTART_TTL)
            assert await next_within(updates) == {"a"}
            await harness.restart_store()
            await retry_while_unavailable(lambda: membership.join("b", RESTART_TTL))
            await until(updates, lambda m: m == {"a", "b"}, 30)
            assert not a.is_lost()

    async def test_assignment_watch_resumes_when_the_broker_restarts(
        self, harness: KafkaHarness
    ) -> None:
        if not harness.restartable:
            pytest.skip("the harness cannot restart this broker")
        async with (
            harness.election() as election,
            harness.store() as store,
            watching(store.watch()) as updates,
        ):
            leader = await election.campaign("leader", RESTART_TTL)
            await store.publish(owners(1, "a"), leader.fence)
            assert await next_within(updates) == owners(1, "a")
            await store.publish(owners(2, "b"), leader.fence)
            assert await next_within(updates) == owners(2, "b")
            await harness.restart_store()
            await retry_while_unavailable(lambda: store.publish(owners(3, "c"), leader.fence))
            assert await next_within(updates, 30) == owners(3, "c")
            assert not leader.is_lost()


@pytest.mark.kafka
@pytest.mark.anyio
class TestKafkaSessionLease:
    """The session's lease across a rebalance (``adapters.kafka._group``)."""

    async def test_a_member_stuck_inside_a_rebalance_loses_its_lease_by_its_ttl(
        self, harness: KafkaHarness
    ) -> None:
        """A member whose JoinGroup answer never gets processed (a paused process) must
        count its lease lost by its TTL: the broker may drop it and give its partitions
        away once the rebalance goes on without it."""
        async with harness.membership() as first, harness.membership() as second:
            lease = await first.join("m-stuck", SHORT_TTL)
            session = lease._session
            real_call = session._call
            stuck = anyio.Event()

            async def call(client: object, request: object, bound: float) -> object:
                response = await real_call(client, request, bound)
                if type(request).__name__.startswith("JoinGroupRequest"):
                    stuck.set()
                    await anyio.sleep_forever()  # the answer arrived; nobody reads it
                return response

            session._call = call  # type: ignore[method-assign]
            other = await second.join("m-other", 30.0)  # a rebalance: the first rejoins
            with anyio.fail_after(30):
                await stuck.wait()
            assert session.deadline <= time.monotonic() + SHORT_TTL
            # The lease is a clock: wait for its own deadline, then it must be lost.
            await anyio.sleep(max(0.0, session.deadline - time.monotonic()) + 0.01)
            assert lease.is_lost()
            await other.leave()
