"""A log that hands its positions out again, checked at the point of truth (the Delta table
read fresh): every new message lands, and none twice.

- a NATS stream restored from a backup (the server stopped, its store copied, later put
  back): the stream keeps its name and creation time, so its log id; the messages stored
  after the backup are gone from it, and new ones take their sequences;
- a NATS stream deleted and re-created under its name;
- a Kafka topic deleted and re-created under its name (offsets start at 0 again).

Each runs the handler's real landing path (``tests._landers``: the ``Lander`` over a local
Delta table) with its view of the log either ``kept`` across the reuse (cached floors and
settled positions) or ``restarted`` after it (read from the table and the broker).
"""

from __future__ import annotations

import logging
import shutil
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import anyio
import anyio.to_thread
import nats
import pytest
from aiokafka.admin import AIOKafkaAdminClient  # type: ignore[import-untyped, unused-ignore]

from adapters.kafka import KafkaSettings, KafkaTransport
from adapters.nats import NatsSettings, NatsTransport
from core.errors import PositionGoneError
from infra.local._handles import RunningNats
from infra.local._testservers import ServerInfo
from infra.local.servers import start_nats
from tests._landers import WITHIN, HeldLease, assert_once, publish, running
from tests._landing_zones import ZoneUnderTest

pytestmark = pytest.mark.anyio

STEP = 20  # messages per step; the reused range is the second step's
REUSED = "positions handed out again"
HANDLERS = ["kept", "restarted"]


async def _until(check: Callable[[], bool], within: float = WITHIN) -> None:
    """Poll ``check``: nats-py's connection state has no event to await."""
    with anyio.fail_after(within):
        while True:
            if check():
                return
            await anyio.sleep(0.05)


# -- NATS -----------------------------------------------------------------------------------


def nats_settings(url: str) -> NatsSettings:
    tag = uuid.uuid4().hex[:10]
    return NatsSettings(
        url=url,
        stream=f"R{tag}",
        subject_prefix=f"r{tag}.data",
        dead_letter_stream=f"R{tag}_DLQ",
        dead_letter_prefix=f"r{tag}.dlq",
        ack_wait=2.0,
        reconnect_wait=0.2,
    )


@pytest.fixture
async def own_nats(tmp_path: Path) -> AsyncIterator[RunningNats]:
    """A nats-server of the test's own: its store is copied and put back."""
    server = await anyio.to_thread.run_sync(lambda: start_nats(tmp_path / "nats"))
    try:
        yield server
    finally:
        await anyio.to_thread.run_sync(server.stop)


async def offline(
    server: RunningNats, transport: NatsTransport, work: Callable[[], object]
) -> None:
    """Stop the server (SIGTERM: its store is flushed), run ``work`` on its data, start it
    again, and return once ``transport`` is connected again."""

    def step() -> None:
        server.stop(remove_data=False)
        work()
        server.restart()

    await anyio.to_thread.run_sync(step)
    await _until(lambda: transport.connected)


@pytest.mark.nats
@pytest.mark.parametrize("handler", HANDLERS)
async def test_a_nats_stream_restored_from_a_backup_lands_every_new_message(
    own_nats: RunningNats, tmp_path: Path, handler: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="shoal.handler")
    zone, backup = ZoneUnderTest(str(tmp_path / "zone")), tmp_path / "backup"

    def restore() -> None:
        shutil.rmtree(own_nats.data_dir)
        shutil.copytree(backup, own_nats.data_dir)

    async with zone.open() as landing, NatsTransport(nats_settings(own_nats.url)) as transport:
        async with running("h1", landing.sink, landing.table, HeldLease("h1")) as path:
            subscription = await transport.open(0, "h1")
            first = await publish(transport, STEP)
            await path.land(subscription, STEP)
            await offline(own_nats, transport, lambda: shutil.copytree(own_nats.data_dir, backup))
            forgotten = await publish(transport, STEP)  # landed; the backup never held them
            await path.land(subscription, STEP)
            await offline(own_nats, transport, restore)
            new = await publish(transport, STEP)  # at the forgotten ones' sequences
            if handler == "kept":
                await path.land(subscription, STEP)
        if handler == "restarted":
            async with running("h2", landing.sink, landing.table, HeldLease("h2")) as path:
                await path.land(await transport.open(0, "h2"), STEP)
        backlog = await transport.backlog(0)

    assert_once(zone, first + forgotten + new)
    assert backlog == 0, "every new message acked"
    assert REUSED in caplog.text, "the reuse is reported"


@pytest.mark.nats
@pytest.mark.parametrize("handler", HANDLERS)
async def test_a_nats_stream_deleted_and_recreated_lands_every_new_message(
    nats_server: ServerInfo, tmp_path: Path, handler: str
) -> None:
    zone, settings = ZoneUnderTest(str(tmp_path / "zone")), nats_settings(nats_server.url)
    async with zone.open() as landing, NatsTransport(settings) as transport:
        async with running("h1", landing.sink, landing.table, HeldLease("h1")) as path:
            subscription = await transport.open(0, "h1")
            first = await publish(transport, STEP)
            await path.land(subscription, STEP)
            nc = await nats.connect(settings.url)
            try:
                await nc.jetstream().delete_stream(settings.stream)
            finally:
                await nc.close()
            async with NatsTransport(settings) as again:  # its start creates the stream
                new = await publish(again, STEP)
                if handler == "kept":
                    with anyio.fail_after(WITHIN), pytest.raises(PositionGoneError):
                        while True:  # what the handler's worker sees before it opens again
                            await subscription.fetch(1, 0.2)
                    await path.land(await again.open(0, "h1"), STEP)
        if handler == "restarted":
            async with (
                NatsTransport(settings) as again,
                running("h2", landing.sink, landing.table, HeldLease("h2")) as path,
            ):
                await path.land(await again.open(0, "h2"), STEP)

    assert_once(zone, first + new)


# -- Kafka ----------------------------------------------------------------------------------


@pytest.fixture
async def kafka_settings(kafka_server: ServerInfo) -> AsyncIterator[KafkaSettings]:
    tag = uuid.uuid4().hex[:10]
    settings = KafkaSettings(
        bootstrap_servers=tuple(kafka_server.endpoints),
        group=f"r{tag}",
        topic=f"r{tag}.data",
        dead_letter_topic=f"r{tag}.dlq",
        registration_topic=f"r{tag}.reg",
        partitions=1,
        ack_wait=2.0,
        retry_backoff=0.1,
    )
    yield settings
    await delete_topics(settings, settings.topic, settings.dead_letter_topic)


async def delete_topics(settings: KafkaSettings, *topics: str) -> None:
    """Delete ``topics`` and return once the broker lists none of them."""
    admin = AIOKafkaAdminClient(bootstrap_servers=",".join(settings.bootstrap_servers))
    await admin.start()
    try:
        with anyio.fail_after(WITHIN):
            await admin.delete_topics(list(topics))
            while True:  # the admin API has no "deleted" event
                if not set(topics) & set(await admin.list_topics()):
                    return
                await anyio.sleep(0.2)
    finally:
        await admin.close()


@pytest.mark.kafka
@pytest.mark.parametrize("handler", HANDLERS)
async def test_a_kafka_topic_deleted_and_recreated_lands_every_new_message(
    kafka_settings: KafkaSettings, tmp_path: Path, handler: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The new topic holds fewer records than the old one's committed offset: a subscription
    kept across the reuse finds its offset gone (``PositionGoneError``), and one opened
    after it starts from the new log's start."""
    caplog.set_level(logging.INFO, logger="shoal.handler")
    zone = ZoneUnderTest(str(tmp_path / "zone"))
    async with zone.open() as landing, KafkaTransport(kafka_settings) as transport:
        async with running("h1", landing.sink, landing.table, HeldLease("h1")) as path:
            subscription = await transport.open(0, "h1")
            first = await publish(transport, STEP)
            await path.land(subscription, STEP)
            await delete_topics(kafka_settings, kafka_settings.topic)
            async with KafkaTransport(kafka_settings) as again:  # its start creates the topic
                new = await publish(again, STEP // 2)  # at offsets the first ones had
                if handler == "kept":
                    with anyio.fail_after(WITHIN), pytest.raises(PositionGoneError):
                        while True:  # what the handler's worker sees before it opens again
                            await subscription.fetch(1, 0.2)
                    await subscription.close()
                    await path.land(await again.open(0, "h1"), STEP // 2)
                else:
                    await subscription.close()
        if handler == "restarted":
            async with (
                KafkaTransport(kafka_settings) as again,
                running("h2", landing.sink, landing.table, HeldLease("h2")) as path,
            ):
                await path.land(await again.open(0, "h2"), STEP // 2)

    assert_once(zone, first + new)
    assert REUSED in caplog.text, "the reuse is reported"
