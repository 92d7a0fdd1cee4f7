"""``Idempotency-Key`` across datacenters, on two nats-servers as two datacenters (``east``,
``west``): gateways composed as ``services.gateway.main`` composes them with
``SHOAL_CLUSTERS`` (``RoutedPublisher`` and ``ClusterIdempotency``, each cluster entered
in the background while it is down). Checked at the point of truth, the messages each
cluster's stream stored:

- a keyed request accepted through east's gateway, retried through west's: 200 with the
  first answer, and the messages are stored once;
- east's nats-server killed: a keyed request through a gateway of east (running, or
  started while east is down) is served through west and its retries are answered 200;
  a request answered before the kill is answered 200 by west; nothing is stored twice;
- the limit: an answer remembered while a cluster was down is not on that cluster.

``ClusterIdempotency`` over both clusters also keeps the IdempotencyStore contract.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import anyio
import httpx
import pytest

from core.errors import StoreUnavailableError
from core.ingest import IngestLimits
from core.ports import IdempotencyStore
from infra.local.servers import RunningNats, start_nats
from services.common.clusters import ClusterIdempotency, enter_datacenters
from services.gateway.app import create_app
from services.gateway.routed import RoutedPublisher
from tests._stored import stored_messages
from tests.contract._idempotency import IdempotencyStoreContract, StoreFactory, answer

pytestmark = pytest.mark.nats

PARTITIONS = 4
LIMIT = 60.0
BODY = b'{"reading": 1}\n{"reading": 2}\n{"reading": 3}\n'


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, RunningNats]]:
    root = tmp_path_factory.mktemp("dcs")
    east = start_nats(root / "east", name="dc-east")
    west = start_nats(root / "west", name="dc-west")
    try:
        yield {"east": east, "west": west}
    finally:
        east.stop()
        west.stop()


@dataclass(frozen=True)
class Datacenters:
    servers: dict[str, RunningNats]
    stream: str
    subject_prefix: str
    monkeypatch: pytest.MonkeyPatch

    @property
    def clusters(self) -> str:
        """``SHOAL_CLUSTERS``."""
        return ",".join(f"{name}={s.url}" for name, s in self.servers.items())

    @asynccontextmanager
    async def gateway(self, home: str) -> AsyncIterator[httpx.AsyncClient]:
        """One gateway process of datacenter ``home`` (its ``SHOAL_CLUSTER`` and
        ``SHOAL_NATS_URL``), composed as ``services.gateway.main`` does."""
        self.monkeypatch.setenv("SHOAL_CLUSTER", home)
        self.monkeypatch.setenv("SHOAL_NATS_URL", self.servers[home].url)
        async with AsyncExitStack() as stack:
            dcs = await enter_datacenters(stack, "nats", idempotency_window=600.0)
            assert dcs is not None and dcs.local == home and dcs.idempotency is not None
            app = create_app(
                RoutedPublisher(dcs.transports, dcs.routes, dcs.clusters, home),
                gateway_id=f"gw-{home}-{uuid.uuid4().hex[:6]}",
                partitions=PARTITIONS,
                limits=IngestLimits(),
                publish_timeout=10.0,
                retry_after_seconds=1,
                idempotency=dcs.idempotency,
            )
            client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw")
            yield await stack.enter_async_context(client)

    async def stored(self, project: str) -> dict[str, int]:
        """The data messages of ``project`` each cluster's stream holds."""
        subject = f"{self.subject_prefix}.*.{project}.data"
        return {
            name: await stored_messages(server.url, self.stream, subject)
            for name, server in self.servers.items()
        }


@pytest.fixture
def dcs(
    servers: dict[str, RunningNats], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Datacenters:
    tag = uuid.uuid4().hex[:10]  # streams and buckets of their own for every test
    dcs = Datacenters(servers, f"D{tag}", f"d{tag}.data", monkeypatch)
    env = {
        "SHOAL_CLUSTERS": dcs.clusters,
        "SHOAL_ROUTES_FILE": str(tmp_path / "routes.json"),  # none: the default table
        "SHOAL_NATS_STREAM": f"D{tag}",
        "SHOAL_NATS_SUBJECT_PREFIX": f"d{tag}.data",
        "SHOAL_NATS_DEAD_LETTER_STREAM": f"D{tag}_DLQ",
        "SHOAL_NATS_DEAD_LETTER_PREFIX": f"d{tag}.dlq",
        "SHOAL_NATS_CONNECT_TIMEOUT": "2",
        "SHOAL_NATS_REQUEST_TIMEOUT": "2",
        "SHOAL_NATS_RECONNECT_WAIT": "0.2",
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return dcs


async def cluster_store(stack: AsyncExitStack, window: float = 600.0) -> ClusterIdempotency:
    """The idempotency store of a gateway with ``SHOAL_CLUSTERS``, entered as it enters it."""
    dcs = await enter_datacenters(stack, "nats", idempotency_window=window)
    assert dcs is not None and dcs.idempotency is not None
    return dcs.idempotency


def url(project: str) -> str:
    return f"/v1/projects/{project}/messages"


@pytest.mark.anyio
async def test_a_retry_through_another_datacenters_gateway_is_answered_from_the_first(
    dcs: Datacenters,
) -> None:
    headers = {"Idempotency-Key": "order-1"}
    with anyio.fail_after(LIMIT):
        async with dcs.gateway("east") as east, dcs.gateway("west") as west:
            first = await east.post(url("dev-a"), content=BODY, headers=headers)
            again = await west.post(url("dev-a"), content=BODY, headers=headers)
            other_body = await west.post(url("dev-a"), content=b'{"reading": 9}', headers=headers)
        assert first.status_code == 202
        assert again.status_code == 200
        assert again.headers["Idempotent-Replayed"] == "true"
        assert again.json() == first.json()
        assert other_body.status_code == 422
        # west's gateway would have published to west (its own): nothing went there
        assert await dcs.stored("dev-a") == {"east": 3, "west": 0}


@pytest.mark.anyio
async def test_keyed_requests_are_served_through_west_while_east_is_down(
    dcs: Datacenters,
) -> None:
    east_server = dcs.servers["east"]
    headers = {"Idempotency-Key": "order-2"}
    with anyio.fail_after(LIMIT):
        async with dcs.gateway("east") as east, dcs.gateway("west") as west:
            before = await east.post(url("dev-b"), content=BODY, headers=headers)
            east_server.kill()
            try:
                served = await east.post(url("dev-c"), content=BODY, headers=headers)
                retried = await east.post(url("dev-c"), content=BODY, headers=headers)
                via_west = await west.post(url("dev-c"), content=BODY, headers=headers)
                async with dcs.gateway("east") as started_while_down:
                    late = await started_while_down.post(
                        url("dev-c"), content=BODY, headers=headers
                    )
                    fresh = await started_while_down.post(
                        url("dev-d"), content=BODY, headers=headers
                    )
                # remembered in both clusters before east went down: west answers it
                retried_before = await west.post(url("dev-b"), content=BODY, headers=headers)
            finally:
                await anyio.to_thread.run_sync(east_server.restart)
        assert before.status_code == 202
        assert served.status_code == 202
        assert served.json()["message_ids"] != before.json()["message_ids"]  # another project
        for replay in (retried, via_west, late):
            assert replay.status_code == 200, replay.text
            assert replay.headers["Idempotent-Replayed"] == "true"
            assert replay.json() == served.json()
        assert (retried_before.status_code, retried_before.json()) == (200, before.json())
        assert fresh.status_code == 202
        assert await dcs.stored("dev-b") == {"east": 3, "west": 0}
        assert await dcs.stored("dev-c") == {"east": 0, "west": 3}
        assert await dcs.stored("dev-d") == {"east": 0, "west": 3}


@pytest.mark.anyio
async def test_the_store_refuses_only_when_no_cluster_answers(dcs: Datacenters) -> None:
    servers = dcs.servers
    remembered = answer(key="both-down")
    with anyio.fail_after(LIMIT):
        async with AsyncExitStack() as stack:
            store = await cluster_store(stack)
            await store.remember(remembered)
            servers["east"].kill()
            servers["west"].kill()
            try:
                with pytest.raises(StoreUnavailableError, match="no cluster answered"):
                    await store.recall(remembered.project_id, remembered.key_digest)
                with pytest.raises(StoreUnavailableError, match="no cluster confirmed"):
                    await store.remember(answer(key="other"))
            finally:
                for server in (servers["east"], servers["west"]):
                    await anyio.to_thread.run_sync(server.restart)


@pytest.mark.anyio
async def test_an_answer_remembered_while_a_cluster_was_down_is_not_on_it_later(
    dcs: Datacenters,
) -> None:
    """The documented limit: once west is back and east is down, west does not know the
    answer remembered while it was down (its retry would be published again)."""
    servers = dcs.servers
    remembered = answer(key="west-was-down")
    with anyio.fail_after(LIMIT):
        async with AsyncExitStack() as stack:
            store = await cluster_store(stack)
            servers["west"].kill()
            try:
                await store.remember(remembered)  # east confirms
            finally:
                await anyio.to_thread.run_sync(servers["west"].restart)
            servers["east"].kill()
            try:
                while True:  # until west's store has reconnected: no event to await
                    try:
                        found = await store.recall(remembered.project_id, remembered.key_digest)
                    except StoreUnavailableError:
                        continue
                    break
                assert found is None
            finally:
                await anyio.to_thread.run_sync(servers["east"].restart)


class TestClusterIdempotency(IdempotencyStoreContract):
    """Both clusters up: the port's promise, as one store keeps it."""

    @pytest.fixture
    def make_store(self, dcs: Datacenters) -> StoreFactory:  # dcs sets SHOAL_CLUSTERS
        def make(window: float) -> AbstractAsyncContextManager[IdempotencyStore]:
            @asynccontextmanager
            async def entered() -> AsyncIterator[IdempotencyStore]:
                async with AsyncExitStack() as stack:
                    yield await cluster_store(stack, window)

            return entered()

        return make
