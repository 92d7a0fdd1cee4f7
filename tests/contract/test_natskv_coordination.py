"""The coordination contract suites against NATS JetStream KV (the session's ``nats_server``).

Every test gets a bucket of its own (a fresh group), deleted afterwards. ``expire`` deletes
the lease's key on the server (a real server-side end, as the key's TTL running out would
be: the watchers see the marker); the restart tests restart the session's nats-server
(local mode: file storage, ``sync_interval: always``), which keeps the bucket.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator

import anyio
import nats
import pytest
from nats.aio.client import Client
from nats.js.api import StorageType
from nats.js.errors import NotFoundError

from adapters.nats import NatsSettings
from adapters.natskv import (
    NatsKvAssignmentStore,
    NatsKvElection,
    NatsKvHoldStore,
    NatsKvLeadership,
    NatsKvLoadReports,
    NatsKvMembership,
    NatsKvMembershipLease,
    NatsKvProjectRegistry,
    NatsKvSettings,
)
from adapters.natskv._keys import decode_id, encode_id
from core.ports import AssignmentStore, Leadership, MembershipLease
from infra.local._testservers import ServerInfo
from tests.contract._coordination import (
    AssignmentStoreContract,
    CoordinationModelContract,
    ElectionContract,
    HoldStoreContract,
    LoadReportsContract,
    MembershipContract,
    ProjectRegistryContract,
    restart_checks_run,
    retry_while_unavailable,
    server_features,
    until,
    watching,
)

# The server removes a key whose TTL (whole seconds, rounded up) ran out within about a
# fifth of a second (measured on nats-server 2.15.1: markers seen 3-210 ms past a 1 s TTL);
# a fractional TTL is rounded up to the next second, hence a whole second of slack.
EXPIRY_SLACK = 1.0


class NatsKvHarness:
    """Adapters on a bucket of their own (one group per test) of the session's nats-server."""

    def __init__(self, server: ServerInfo, admin: Client) -> None:
        self._server = server
        self._admin = admin
        self.settings = NatsKvSettings(
            group=f"t-{uuid.uuid4().hex[:12]}",
            nats=NatsSettings(url=server.url, reconnect_wait=0.2),
        )
        self.features = server_features(server, expiry_slack=EXPIRY_SLACK)

    def membership(self) -> NatsKvMembership:
        return NatsKvMembership(self.settings)

    def reports(self) -> NatsKvLoadReports:
        return NatsKvLoadReports(self.settings)

    def election(self) -> NatsKvElection:
        return NatsKvElection(self.settings)

    def store(self) -> NatsKvAssignmentStore:
        return NatsKvAssignmentStore(self.settings)

    def hold_store(self) -> NatsKvHoldStore:
        return NatsKvHoldStore(self.settings)

    def registry(self) -> NatsKvProjectRegistry:
        return NatsKvProjectRegistry(self.settings)

    def write_call(self, store: AssignmentStore) -> tuple[object, str]:
        assert isinstance(store, NatsKvAssignmentStore)
        return store._bucket, "update_fenced"

    async def expire(self, lease: MembershipLease | Leadership) -> None:
        """Purge the lease's key on the server, as its TTL running out would."""
        assert isinstance(lease, NatsKvMembershipLease | NatsKvLeadership)
        kv = await self._admin.jetstream().key_value(self.settings.bucket_name)
        await kv.purge(lease.key)

    def pause_renewal(self, lease: MembershipLease | Leadership) -> None:
        assert isinstance(lease, NatsKvMembershipLease | NatsKvLeadership)
        lease.pause_renewal()

    async def restart_store(self) -> None:
        assert self._server.process is not None
        await anyio.to_thread.run_sync(self._server.process.restart)

    async def clean(self) -> None:
        with contextlib.suppress(NotFoundError):
            await self._admin.jetstream().delete_key_value(self.settings.bucket_name)


@pytest.fixture
async def harness(nats_server: ServerInfo) -> AsyncIterator[NatsKvHarness]:
    admin = await nats.connect(nats_server.url, max_reconnect_attempts=-1, reconnect_time_wait=0.2)
    try:
        harness = NatsKvHarness(nats_server, admin)
        yield harness
        with contextlib.suppress(nats.errors.Error, TimeoutError):  # may still be restarting
            await harness.clean()
    finally:
        await admin.close()


@pytest.mark.natskv
class TestNatsKvMembership(MembershipContract):
    pass


@pytest.mark.natskv
class TestNatsKvLoadReports(LoadReportsContract):
    pass


@pytest.mark.natskv
class TestNatsKvElection(ElectionContract):
    pass


@pytest.mark.natskv
class TestNatsKvAssignmentStore(AssignmentStoreContract):
    pass


@pytest.mark.natskv
class TestNatsKvHoldStore(HoldStoreContract):
    pass


@pytest.mark.natskv
class TestNatsKvProjectRegistry(ProjectRegistryContract):
    pass


@pytest.mark.natskv
class TestNatsKvAgainstTheModel(CoordinationModelContract):
    pass


@pytest.mark.parametrize("raw", ["a", "handler-1_x", "a.b", "", "é/ü =x", ">*"])
def test_ids_escape_to_kv_keys_and_back(raw: str) -> None:
    token = encode_id(raw)
    assert all(c.isalnum() or c in "-_=" for c in token)
    assert decode_id(token) == raw


def test_the_bucket_name_is_derived_from_the_group() -> None:
    assert NatsKvSettings(group="g-1").bucket_name == "shoal_g-1"
    assert NatsKvSettings(group="g", bucket="mine").bucket_name == "mine"


@pytest.mark.natskv
@pytest.mark.anyio
async def test_the_bucket_keeps_per_key_ttls_and_expiry_markers_on_file_storage(
    harness: NatsKvHarness,
) -> None:
    """Created with TTLs and markers; a bucket made before without them is switched over
    (else TTL writes are refused and expirations invisible to the watchers)."""
    js = harness._admin.jetstream()
    await js.create_key_value(bucket=harness.settings.bucket_name, history=1)  # a plain one
    with anyio.fail_after(10):
        async with harness.membership() as membership:
            lease = await membership.join("a", 1.0)
            info = await js.stream_info(f"KV_{harness.settings.bucket_name}")
            assert info.config.allow_msg_ttl
            assert info.config.subject_delete_marker_ttl == harness.settings.marker_ttl
            assert info.config.storage == StorageType.FILE
            assert info.config.max_msgs_per_subject == 1
            harness.pause_renewal(lease)
            async with watching(membership.watch()) as updates:
                await until(updates, lambda m: m == set(), 1.0 + EXPIRY_SLACK + 2)


@pytest.mark.natskv
@pytest.mark.anyio
async def test_a_member_that_left_stays_gone_after_the_server_is_killed(
    harness: NatsKvHarness,
) -> None:
    """nats-io/nats-server#8505 (open on 2.15.1): on a one-replica file stream, a value
    removed by a purge comes back after an unclean shutdown once its marker expired. With
    TTL'd delete markers (1 s here, 60 s by default then) a member that left came back
    for good; a delete marker without a TTL keeps it shadowed."""
    restart_checks_run(harness.features)
    server = harness._server.process
    assert server is not None
    settings = harness.settings.model_copy(update={"marker_ttl": 1.0})
    async with NatsKvMembership(settings) as membership:
        await membership.join("stays", 60.0)
        leaving = await membership.join("leaves", 60.0)
        await leaving.leave()
        assert await membership.members() == {"stays"}
        # The bug needs the marker gone: a TTL'd one would have expired by now. Time is
        # the condition here, not a stand-in for an event.
        await anyio.sleep(settings.marker_ttl + EXPIRY_SLACK + 1.0)
        await anyio.to_thread.run_sync(server.kill)
        await anyio.to_thread.run_sync(server.restart)
        assert await retry_while_unavailable(membership.members) == {"stays"}
