"""The Transport contract on ``KafkaTransport`` against a real Kafka broker (KRaft)."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager

import anyio
import anyio.to_thread
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition  # type: ignore[import-untyped, unused-ignore]
from aiokafka.admin import AIOKafkaAdminClient  # type: ignore[import-untyped, unused-ignore]
from aiokafka.admin.config_resource import (  # type: ignore[import-untyped, unused-ignore]
    ConfigResource,
    ConfigResourceType,
)

from adapters.kafka import KafkaDeadLetterQueue, KafkaHistory, KafkaSettings, KafkaTransport
from adapters.kafka._settlements import Settlements
from core.errors import BrokerUnavailableError, DurabilityError, PublishError
from core.replay import AtPosition, Window
from infra.local._testservers import ServerInfo
from tests._unavailable import local_process
from tests.contract._dead_letter_queue import DeadLetterQueueContract, QueueFactory
from tests.contract._history import HistoryContract, HistoryFactory, read
from tests.contract._transport import (
    ACK_WAIT,
    ClosableTransport,
    DeadLetterLog,
    Features,
    PositionedFactory,
    TransportContract,
    TransportFactory,
    envelope,
    fetch_n,
    fetch_none,
    publish_each,
)

PARTITIONS = 16  # the contract uses partitions 0..12


# -- the settlements (pure: per-message settlement over one committed offset) ----------------------


def test_settlements_commit_point_moves_over_contiguous_settlements_only() -> None:
    settlements = Settlements(10)
    assert [settlements.delivered(o) for o in (10, 11, 12, 13)] == [1, 1, 1, 1]
    settlements.settle(11)
    settlements.settle(13)
    assert (settlements.base, settlements.settled) == (10, {11, 13})
    settlements.settle(10)
    assert (settlements.base, settlements.settled) == (12, {13})


def test_settlements_round_trips_through_commit_metadata() -> None:
    settlements = Settlements(100)
    for o in range(100, 110):
        settlements.delivered(o)
    settlements.delivered(103)  # a redelivery
    for o in (101, 102, 105, 106, 107):
        settlements.settle(o)
    restored = Settlements.restore(settlements.base, settlements.metadata())
    assert restored.base == 100
    assert restored.settled == {101, 102, 105, 106, 107}
    assert [restored.count(o) for o in (100, 103, 104, 109, 110)] == [1, 2, 1, 1, 0]
    assert restored.delivered(103) == 3


def test_settlements_metadata_stays_under_the_limit_by_dropping_out_of_order_acks_first() -> None:
    settlements = Settlements(0)
    for o in range(5000):
        settlements.delivered(o)
        settlements.delivered(o)
    for o in range(1, 5000, 2):
        settlements.settle(o)
    text = settlements.metadata(limit=2000)
    assert len(text) <= 2000 and settlements.truncated
    restored = Settlements.restore(0, text)
    assert restored.settled == set()  # those acked messages would be redelivered
    assert restored.count(0) == 2


def test_settlements_reservation_counts_offsets_below_it_as_delivered_once() -> None:
    settlements = Settlements(50)
    settlements.delivered(50)
    restored = Settlements.restore(50, settlements.metadata(reserve_to=60))
    assert [restored.count(o) for o in (50, 59, 60)] == [1, 1, 0]
    exact = Settlements.restore(50, settlements.metadata())
    assert [exact.count(o) for o in (50, 51)] == [1, 0]


def test_settlements_ignores_metadata_it_did_not_write() -> None:
    assert Settlements.restore(7, "something else").base == 7
    assert Settlements.restore(7, "").count(7) == 0


async def read_topic(bootstrap: str, topic: str, n: int, limit: float = 15.0) -> list[object]:
    """The first ``n`` records of partition 0 of ``topic``."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        got: list[object] = []
        with anyio.fail_after(limit):
            while len(got) < n:
                batch = await consumer.getmany(tp, timeout_ms=500)
                got.extend(batch.get(tp, []))
        return got
    finally:
        await consumer.stop()


@pytest.fixture
async def settings(kafka_server: ServerInfo) -> AsyncIterator[KafkaSettings]:
    tag = uuid.uuid4().hex[:10]  # topics and an offsets group of their own per test
    settings = KafkaSettings(
        bootstrap_servers=tuple(kafka_server.endpoints),
        group=f"t{tag}",
        topic=f"t{tag}.data",
        dead_letter_topic=f"t{tag}.dlq",
        registration_topic=f"t{tag}.reg",
        partitions=PARTITIONS,
        ack_wait=ACK_WAIT,
        retry_backoff=0.1,
    )
    yield settings
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_server.endpoint)
    await admin.start()
    try:
        with anyio.move_on_after(10):
            await admin.delete_topics(
                [settings.topic, settings.dead_letter_topic, settings.registration_topic]
            )
    finally:
        await admin.close()


@pytest.fixture
def make_transport(settings: KafkaSettings) -> TransportFactory:
    def make(dead: DeadLetterLog) -> AbstractAsyncContextManager[ClosableTransport]:
        return KafkaTransport(settings, dead_letter=dead)

    return make


@pytest.mark.kafka
class TestKafkaTransport(TransportContract):
    features = Features(persistent=True)

    @pytest.fixture
    def make_transport_at(self, settings: KafkaSettings) -> PositionedFactory:
        def make(
            dead: DeadLetterLog, position: str
        ) -> AbstractAsyncContextManager[ClosableTransport]:
            return KafkaTransport(settings, dead_letter=dead, position=position)

        return make

    @pytest.fixture
    def crash_and_restart(self, kafka_server: ServerInfo) -> Callable[[], Awaitable[None]]:
        async def crash() -> None:
            process = local_process(kafka_server, "kill and restart")
            pid = process.pid
            process.kill()
            await anyio.to_thread.run_sync(process.restart)
            assert process.pid != pid

        return crash

    # -- Kafka specifics -------------------------------------------------------------------

    async def test_publish_lands_in_the_envelope_partition_with_headers_and_key(
        self, transport: ClosableTransport, settings: KafkaSettings
    ) -> None:
        e = envelope(9, "projA", 3, payload=b'{"t": 1}')
        await transport.publish([e])
        consumer = AIOKafkaConsumer(bootstrap_servers=settings.bootstrap, enable_auto_commit=False)
        await consumer.start()
        try:
            tp = TopicPartition(settings.topic, 9)
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            with anyio.fail_after(10):
                records: list[object] = []
                while not records:
                    records = (await consumer.getmany(tp, timeout_ms=500)).get(tp, [])
        finally:
            await consumer.stop()
        (r,) = records
        assert r.key == b"projA" and r.value == b'{"t": 1}'  # type: ignore[attr-defined]
        headers = dict(r.headers)  # type: ignore[attr-defined]
        assert headers["Shoal-Msg-Id"] == e.message_id.encode()
        assert headers["Shoal-Gateway"] == "gw 1/ü".encode()

    async def test_pack_a_request_of_one_project_is_one_record_and_its_parts_share_the_offset(
        self, transport: ClosableTransport, settings: KafkaSettings
    ) -> None:
        sent = [envelope(0, "projA", i) for i in range(1, 51)]
        await transport.publish(sent)
        (r,) = await read_topic(settings.bootstrap, settings.topic, 1)
        headers = dict(r.headers)  # type: ignore[attr-defined]
        assert r.key == b"projA"  # type: ignore[attr-defined]
        assert headers["Shoal-Pack"] == b"1"
        assert headers["Shoal-Msg-Id"] == f"pack:50:{sent[0].message_id}".encode()
        sub = await transport.open(0, "h1")
        got = await fetch_n(sub, 50)
        assert {d.position for d in got} == {r.offset}  # type: ignore[attr-defined]
        assert await transport.backlog(0) == 1  # one stored record
        await sub.ack(got[:49])
        assert await transport.backlog(0) == 1, "settled once every part is"
        await sub.ack(got[49:])
        assert await transport.backlog(0) == 0

    async def test_enter_fails_clearly_when_the_topic_has_another_partition_count(
        self, settings: KafkaSettings
    ) -> None:
        async with KafkaTransport(settings):
            pass  # creates the topic with PARTITIONS partitions
        wrong = settings.model_copy(update={"partitions": PARTITIONS * 2})
        with pytest.raises(ValueError, match=r"has 16 partitions but shoal is configured for 32"):
            async with KafkaTransport(wrong):
                pass

    async def test_enter_refuses_a_topic_that_allows_unclean_elections_or_fewer_in_sync(
        self, settings: KafkaSettings
    ) -> None:
        """A data topic created by someone else, as the brokers keep it: one that lets an
        out-of-sync replica lead (offsets handed out again) or asks fewer in-sync replicas
        than configured is refused with what is wrong."""
        unclean = settings.model_copy(
            update={"topic_config": {"unclean.leader.election.enable": "true"}}
        )
        with pytest.raises(DurabilityError, match=r"unclean\.leader\.election\.enable=true"):
            async with KafkaTransport(unclean):
                pass
        stricter = settings.model_copy(update={"topic": f"{settings.topic}-b"})
        async with KafkaTransport(stricter):
            pass  # creates it with min.insync.replicas 1
        wanting_two = stricter.model_copy(
            update={"replication_factor": 2, "min_insync_replicas": 2, "create_topics": False}
        )
        with pytest.raises(
            DurabilityError,
            match=r"1 replicas \(configured: 2\), min\.insync\.replicas=1 \(configured: 2\)",
        ):
            async with KafkaTransport(wanting_two):
                pass

    async def test_open_resumes_after_out_of_order_acks_when_a_subscription_closed(
        self, transport: ClosableTransport
    ) -> None:
        sent = [envelope(3, "a", i) for i in range(1, 6)]
        await publish_each(transport, sent)
        old = await transport.open(3, "h1")
        got = await fetch_n(old, 5)
        await old.ack([got[0], got[2], got[4]])  # 2nd and 4th stay unsettled
        assert await transport.backlog(3) == 2
        await old.close()
        new = await transport.open(3, "h2")
        again = await fetch_n(new, 2)
        assert [d.envelope for d in again] == [sent[1], sent[3]]
        assert [d.attempt for d in again] == [1, 1]  # the close excused them
        await new.ack(again)
        await fetch_none(new, 0.3)
        assert await transport.backlog(3) == 0

    async def test_deliveries_before_a_crash_count_as_attempts_for_the_next_subscriber(
        self, transport: ClosableTransport
    ) -> None:
        """Records a subscriber had fetched when its handler died (no close, no ack) come to
        the next one with attempt 2: the delivery counts were committed before the fetch
        returned (in a reservation ahead of the reads), so a record that crashes its
        handler spends its retry budget instead of looping forever."""
        sent = [envelope(10, "a", i) for i in range(1, 4)]
        await transport.publish(sent)
        crashed = await transport.open(10, "h1")
        await fetch_n(crashed, 3)
        successor = await transport.open(10, "h2")  # the crashed one never closes
        again = await fetch_n(successor, 3)
        assert [d.envelope for d in again] == sent
        assert [d.attempt for d in again] == [2, 2, 2]
        await successor.ack(again)
        assert await transport.backlog(10) == 0

    async def test_an_open_subscription_keeps_working_when_the_broker_is_killed_and_restarted(
        self, transport: ClosableTransport, crash_and_restart: Callable[[], Awaitable[None]]
    ) -> None:
        first = [envelope(8, "a", i) for i in range(1, 11)]
        await transport.publish(first)
        sub = await transport.open(8, "h1")
        got = await fetch_n(sub, 10)
        await sub.ack(got[:5])
        await crash_and_restart()
        with anyio.fail_after(30):  # commits after the restart (aiokafka reconnects)
            while True:
                try:
                    await sub.ack(got[5:])
                    break
                except BrokerUnavailableError:
                    await anyio.sleep(0.5)
        second = [envelope(8, "a", i) for i in range(11, 16)]
        with anyio.fail_after(30):
            while True:
                try:
                    await transport.publish(second)
                    break
                except PublishError:
                    await anyio.sleep(0.5)
        again = await fetch_n(sub, 5, limit=30)
        assert [d.envelope for d in again] == second
        await sub.ack(again)
        assert await transport.backlog(8) == 0

    async def test_dead_letters_are_copied_to_the_dead_letter_topic(
        self, transport: ClosableTransport, settings: KafkaSettings, dead: DeadLetterLog
    ) -> None:
        doomed, termed = envelope(0, "projA", 1), envelope(0, "projB", 2)
        await transport.publish([doomed, termed])
        sub = await transport.open(0, "h1")
        with anyio.fail_after(15):
            while len(dead.items) < 2:
                for d in await sub.fetch(10, 0.3):
                    if d.envelope == termed:
                        await d.dead_letter("unprocessable")
                    elif d.attempt == 2:  # a consumer whose retry budget is one delivery
                        await d.dead_letter("max_deliver")
        assert sorted(r for _, r, _ in dead.items) == ["max_deliver", "unprocessable"]
        assert await transport.backlog(0) == 0
        records = await read_topic(settings.bootstrap, settings.dead_letter_topic, 2)
        by_id = {dict(r.headers)["Shoal-Msg-Id"].decode(): r for r in records}  # type: ignore[attr-defined]
        r = by_id[doomed.message_id]
        assert r.value == doomed.payload  # type: ignore[attr-defined]
        assert dict(r.headers)["Shoal-Dead-Reason"] == b"max_deliver"  # type: ignore[attr-defined]
        assert dict(r.headers)["Shoal-Dead-Attempts"] == b"2"  # type: ignore[attr-defined]

    async def test_reply_registration_is_a_record_on_the_registration_topic(
        self, transport: ClosableTransport, settings: KafkaSettings
    ) -> None:
        await transport.reply_registration(3, "projA", "h1")
        (r,) = await read_topic(settings.bootstrap, settings.registration_topic, 1)
        assert r.key == b"projA"  # type: ignore[attr-defined]
        assert json.loads(r.value) == {"project": "projA", "partition": 3, "handler": "h1"}  # type: ignore[attr-defined]
        assert await transport.backlog(3) == 0  # not on the data topic

    async def test_publish_raises_publish_error_naming_the_count_when_the_topic_is_gone(
        self, settings: KafkaSettings
    ) -> None:
        short = settings.model_copy(update={"publish_timeout": 3.0, "close_timeout": 1.0})
        async with KafkaTransport(short) as transport:
            admin = AIOKafkaAdminClient(bootstrap_servers=settings.bootstrap)
            await admin.start()
            try:
                await admin.delete_topics([settings.topic])
                with anyio.fail_after(10):  # until the broker applied the deletion
                    while True:
                        if settings.topic not in await admin.list_topics():
                            break
                        await anyio.sleep(0.1)
            finally:
                await admin.close()
            with anyio.fail_after(15), pytest.raises(PublishError, match=r"^3 of 3 messages"):
                await transport.publish([envelope(0, sequence=i) for i in range(1, 4)])

    async def test_a_commit_above_the_log_end_skips_no_new_record(
        self, transport: ClosableTransport, settings: KafkaSettings
    ) -> None:
        """The topic was recreated (or an unclean election cut the log): the committed
        offset is above the end. New records take the offsets the commit claims; they must
        still be delivered and counted in the backlog."""
        await transport.publish([envelope(5, "a", 1)])  # the topic exists, end offset 1
        committer = AIOKafkaConsumer(
            bootstrap_servers=settings.bootstrap,
            group_id=settings.offsets_group_id,
            enable_auto_commit=False,
        )
        await committer.start()
        try:
            tp = TopicPartition(settings.topic, 5)
            committer.assign([tp])
            await committer.commit({tp: 1_000})
        finally:
            await committer.stop()
        fresh = [envelope(5, "a", i) for i in range(2, 6)]
        await publish_each(transport, fresh)
        assert await transport.backlog(5) == 5
        subscription = await transport.open(5, "h1")
        got = await fetch_n(subscription, 5)
        assert [d.envelope for d in got][1:] == fresh
        await subscription.ack(got)
        assert await transport.backlog(5) == 0
        await subscription.close()


@pytest.mark.kafka
class TestKafkaDeadLetterQueue(DeadLetterQueueContract):
    @pytest.fixture
    def make_queue(self, settings: KafkaSettings) -> QueueFactory:
        return lambda: KafkaDeadLetterQueue(settings)


@pytest.mark.kafka
class TestKafkaHistory(HistoryContract):
    @pytest.fixture
    def make_history(self, settings: KafkaSettings) -> HistoryFactory:
        return lambda _transport: KafkaHistory(settings)

    async def test_a_partition_the_topic_does_not_have_is_refused(
        self, history: KafkaHistory
    ) -> None:
        with pytest.raises(ValueError, match=r"outside 0\.\.15"):
            await read(history, PARTITIONS, Window(AtPosition(0)))


@pytest.mark.kafka
@pytest.mark.anyio
async def test_the_data_topic_is_created_with_the_retention_asked_for(
    settings: KafkaSettings,
) -> None:
    kept = settings.model_copy(update={"retention_age": 3600.0, "retention_bytes": 10**9})
    async with KafkaTransport(kept):
        pass
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.bootstrap)
    await admin.start()
    try:
        (response,) = await admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, settings.topic)]
        )
    finally:
        await admin.close()
    configs = {entry[0]: entry[1] for entry in response.resources[0][4]}
    assert (configs["retention.ms"], configs["retention.bytes"]) == ("3600000", "1000000000")
