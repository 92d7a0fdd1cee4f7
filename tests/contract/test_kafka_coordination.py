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
import json
import logging
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
from adapters.kafka._aiokafka import (
    AIOKafkaAdminClient,
    AIOKafkaConsumer,
    KafkaError,
    TopicPartition,
)
from adapters.kafka._coord_aiokafka import (
    AIOKafkaClient,
    ConnectionGroup,
    CoordinationType,
    LeaveGroupRequest,
)
from adapters.kafka._coord_base import CoordNames, read_session_bounds
from adapters.kafka._coord_log import LogState, _StateWire
from core.ports import AssignmentStore, Leadership, MembershipLease
from infra.local._testservers import ServerInfo
from tests._unavailable import local_process
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
# Outlives a broker restart and the rebalance after it on a slow, busy machine (CI's took
# over 30 s while two test lanes shared its 2 cores).
RESTART_TTL = 60.0


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

    def write_call(self, store: AssignmentStore) -> tuple[object, str]:
        assert isinstance(store, KafkaAssignmentStore)
        return store.log, "request"  # appends the publish; the log applies it in order

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
        if isinstance(lease, KafkaLeadership):
            # The log learns of an expired leader from the rebalance that follows, whose
            # group leader (any other session: a handler, a candidate) appends ``depose``;
            # with no other session alive nobody does until the next one joins (README,
            # Limits). Here the harness plays that session.
            await lease._election.log.post("depose", term=lease.term)

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
    """The suites' ``test_watch_resumes_when_store_restarts``, with leases (and waits) as
    long as ``RESTART_TTL``."""

    async def test_member_watch_resumes_when_the_broker_restarts(
        self, harness: KafkaHarness, kafka_server: ServerInfo
    ) -> None:
        local_process(kafka_server, "restart")  # a Docker or external broker cannot be restarted
        async with (
            harness.membership() as observer,
            harness.membership() as membership,
            watching(observer.watch()) as updates,
        ):
            assert await next_within(updates) == set()
            a = await membership.join("a", RESTART_TTL)
            assert await next_within(updates) == {"a"}
            await harness.restart_store()
            await retry_while_unavailable(lambda: membership.join("b", RESTART_TTL), RESTART_TTL)
            await until(updates, lambda m: m == {"a", "b"}, RESTART_TTL)
            assert not a.is_lost()

    async def test_assignment_watch_resumes_when_the_broker_restarts(
        self, harness: KafkaHarness, kafka_server: ServerInfo
    ) -> None:
        local_process(kafka_server, "restart")  # a Docker or external broker cannot be restarted
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
            await retry_while_unavailable(
                lambda: store.publish(owners(3, "c"), leader.fence), RESTART_TTL
            )
            assert await next_within(updates, RESTART_TTL) == owners(3, "c")
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


# -- compaction: snapshot, then delete what precedes it -------------------------------------


def _record(op: str, **fields: object) -> bytes:
    return json.dumps({"op": op, "rid": "", **fields}).encode()


def _replayed(records: list[bytes]) -> LogState:
    state = LogState()
    for offset, raw in enumerate(records):
        state.apply(offset, raw)
    return state


HISTORY = [
    _record("lead", id="l1", inc="i1", term=3),
    _record("claim", p=0, member="a", generation=1, replacing=None),
    _record("claim", p=1, member="b", generation=1, replacing=None),
    _record(
        "publish", id="l1", inc="i1", term=3, assignment={"generation": 1, "owners": [["a"], ["b"]]}
    ),
    _record("projects", p=1, projects=["proj-x"], now=100.0, ttl=3600.0, cap=10),
    _record("release", p=0, member="a"),
]


def _snapshot_of(state: LogState, upto: int) -> bytes:
    wire = _StateWire.of(state.model).model_dump(mode="json")
    return _record("snapshot", upto=upto, state=wire)


def test_a_reader_that_starts_at_a_consistent_snapshot_decides_as_the_replay_does() -> None:
    full = _replayed(HISTORY)
    snapshot = _snapshot_of(full, len(HISTORY))
    _, applied = full.apply(len(HISTORY), snapshot)
    assert applied.accepted  # consistent: nothing between upto and itself
    fresh = LogState()  # the log was cut before the snapshot: it starts there
    _, loaded = fresh.apply(len(HISTORY), snapshot)
    assert loaded.accepted and fresh.model == full.model
    assert list(fresh.history) == [full.model.assignment]
    hold = full.model.holds[1]  # a compare-and-set on the version kept by the snapshot
    nxt = _record("claim", p=1, member="c", generation=2, replacing=hold.version)
    outcomes = [s.apply(len(HISTORY) + 1, nxt)[1] for s in (full, fresh)]
    assert [o.accepted for o in outcomes] == [True, True]
    assert full.model == fresh.model


def test_a_registration_record_of_an_older_version_changes_nothing() -> None:
    """Before registrations expired, a ``project`` record registered for ever: replayed
    now it changes nothing (the handler registers its active projects again)."""
    state = _replayed(HISTORY)
    before = state.model
    _, applied = state.apply(len(HISTORY), _record("project", p=1, project="old"))
    assert applied.accepted and state.model == before
    assert state.model.live_projects(1, 200.0) == {"proj-x"}
    assert state.model.live_projects(1, 3700.0) == frozenset()  # expired


def test_a_snapshot_with_requests_after_its_upto_is_not_used() -> None:
    state = _replayed(HISTORY)
    stale = _snapshot_of(_replayed(HISTORY[:-1]), len(HISTORY) - 1)  # taken before "release"
    before = state.model
    _, applied = state.apply(len(HISTORY), stale)
    assert not applied.accepted and "follow" in applied.reason
    assert state.model == before


def test_a_snapshot_that_disagrees_with_the_replay_is_refused_loudly(
    caplog: pytest.LogCaptureFixture,
) -> None:
    state = _replayed(HISTORY)
    forged = _record("projects", p=2, projects=["forged"], now=100.0, ttl=3600.0, cap=10)
    other = _replayed([*HISTORY, forged])
    with caplog.at_level(logging.ERROR, "shoal.adapters.kafka.coord"):
        _, applied = state.apply(len(HISTORY), _snapshot_of(other, len(HISTORY)))
    assert not applied.accepted
    assert "disagrees" in caplog.text


def test_a_log_cut_anywhere_but_at_a_snapshot_decides_nothing() -> None:
    state = LogState()
    with pytest.raises(ValueError, match="no snapshot"):
        state.apply(5, HISTORY[1])
    assert state.model.holds == {}


@pytest.mark.kafka
@pytest.mark.anyio
async def test_the_leader_compacts_the_log_and_a_new_reader_sees_the_same_state(
    harness: KafkaHarness,
) -> None:
    harness.settings = harness.settings.model_copy(update={"coord_log_compact_records": 30})
    async with (
        harness.election() as election,
        harness.store() as store,
        harness.hold_store() as holds,
        harness.registry() as registry,
    ):
        leader = await election.campaign("leader", RESTART_TTL)
        for round_ in range(12):  # 24 hold records, then publishes past the threshold
            await holds.claim(
                round_ % 4, f"h{round_}", round_, (await holds.holds()).get(round_ % 4)
            )
            await holds.release(round_ % 4, f"h{round_}")
        await holds.claim(2, "keeper", 99, None)
        now = time.time()
        await registry.register(5, ["proj-kept"], now=now, ttl=3600.0, cap=10)
        start = await _log_start(harness)
        for generation in range(1, 8):
            await store.publish(owners(generation, "a", "b"), leader.fence)
        with anyio.fail_after(30):
            # The broker's log start is another process's state: polled, not awaited.
            while (moved := await _log_start(harness)) == start:  # noqa: ASYNC110
                await anyio.sleep(0.2)
        assert moved > start
        async with (
            KafkaHoldStore(harness.settings) as fresh_holds,
            KafkaAssignmentStore(harness.settings) as fresh_store,
            KafkaProjectRegistry(harness.settings) as fresh_registry,
        ):
            assert await fresh_holds.holds() == await holds.holds()
            assert await fresh_store.current() == owners(7, "a", "b")
            assert await fresh_registry.projects(5, now=now) == {"proj-kept"}
            kept = (await fresh_holds.holds())[2]
            assert await fresh_holds.claim(2, "next", 100, kept)  # versions survived
            await fresh_store.publish(owners(8, "b", "a"), leader.fence)  # terms did too
            assert await store.current() == owners(8, "b", "a")


async def _log_start(harness: KafkaHarness) -> int:
    reader = AIOKafkaConsumer(bootstrap_servers=harness.settings.bootstrap_servers[0])
    await reader.start()
    try:
        tp = TopicPartition(harness.names.log_topic, 0)
        return int((await reader.beginning_offsets([tp]))[tp])
    finally:
        await reader.stop()
