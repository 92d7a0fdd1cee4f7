"""The Transport contract on ``NatsTransport`` against a real nats-server."""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from urllib.parse import unquote

import anyio
import nats
import pytest
from nats.js import api as js_api
from nats.js.errors import NotFoundError

from adapters._nats_durability import check_stream
from adapters.nats import NatsDeadLetterQueue, NatsHistory, NatsSettings, NatsTransport
from core.errors import DurabilityError, PublishError
from core.replay import AtPosition, NotReplayableError, Window
from infra.local._handles import RunningNats
from infra.local._testservers import ServerInfo
from infra.local.servers import start_nats
from tests._unavailable import local_process
from tests.contract._dead_letter_queue import DeadLetterQueueContract, QueueFactory
from tests.contract._history import HistoryContract, HistoryFactory, read
from tests.contract._nats_streams import delete_streams
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
    publish_each,
)


@pytest.fixture
async def settings(nats_server: ServerInfo) -> AsyncIterator[NatsSettings]:
    tag = uuid.uuid4().hex[:10]  # a stream and subjects of its own for every test
    settings = NatsSettings(
        url=nats_server.url,
        stream=f"T{tag}",
        subject_prefix=f"t{tag}.data",
        dead_letter_stream=f"T{tag}_DLQ",
        dead_letter_prefix=f"t{tag}.dlq",
        ack_wait=ACK_WAIT,
        reconnect_wait=0.2,
    )
    yield settings
    await delete_streams(settings)


@pytest.fixture
def make_transport(settings: NatsSettings) -> TransportFactory:
    def make(dead: DeadLetterLog) -> AbstractAsyncContextManager[ClosableTransport]:
        return NatsTransport(settings, dead_letter=dead)

    return make


@pytest.mark.nats
class TestNatsTransport(TransportContract):
    features = Features(persistent=True, competing_subscriptions=True)

    @pytest.fixture
    def make_transport_at(self, settings: NatsSettings) -> PositionedFactory:
        def make(
            dead: DeadLetterLog, position: str
        ) -> AbstractAsyncContextManager[ClosableTransport]:
            return NatsTransport(settings, dead_letter=dead, position=position)

        return make

    @pytest.fixture
    def crash_and_restart(self, nats_server: ServerInfo) -> Callable[[], Awaitable[None]]:
        async def crash() -> None:
            process = local_process(nats_server, "kill and restart")
            pid = process.pid
            process.kill()
            await anyio.to_thread.run_sync(process.restart)
            assert process.pid != pid

        return crash

    async def test_reply_registration_is_a_core_publish_when_answered(
        self, transport: ClosableTransport, settings: NatsSettings
    ) -> None:
        nc = await nats.connect(settings.url)
        try:
            sub = await nc.subscribe(f"{settings.subject_prefix}.p3.projA.reg.response")
            await nc.flush()
            await transport.reply_registration(3, "projA", "h1")
            msg = await sub.next_msg(timeout=5)
            assert json.loads(msg.data) == {"project": "projA", "partition": 3, "handler": "h1"}
            assert await transport.backlog(3) == 0  # not stored
        finally:
            await nc.close()

    async def test_dead_letters_are_copied_to_their_stream_with_their_reason(
        self, transport: ClosableTransport, settings: NatsSettings, dead: DeadLetterLog
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
        assert await transport.backlog(0) == 0  # neither is pending any more
        nc = await nats.connect(settings.url)
        try:
            js = nc.jetstream()
            # Limits retention keeps terminated messages (consumed, replayable).
            assert (await js.stream_info(settings.stream)).state.messages == 2
            dlq = await js.stream_info(settings.dead_letter_stream, subjects_filter=">")
            assert dlq.state.subjects == {
                f"{settings.dead_letter_prefix}.p0.projA": 1,
                f"{settings.dead_letter_prefix}.p0.projB": 1,
            }
            raw = await js.get_last_msg(
                settings.dead_letter_stream, f"{settings.dead_letter_prefix}.p0.projA"
            )
            assert raw.data == doomed.payload
            assert raw.headers is not None
            assert raw.headers["Shoal-Dead-Reason"] == "max_deliver"
            assert raw.headers["Shoal-Dead-Attempts"] == "2"
            # The message id, and the copy's own dedupe id (id @ work-stream sequence).
            assert raw.headers["Shoal-Msg-Id"] == doomed.message_id
            assert unquote(raw.headers["Nats-Msg-Id"]).startswith(f"{doomed.message_id}@")
        finally:
            await nc.close()

    async def test_publish_raises_publish_error_naming_the_count_when_the_stream_is_gone(
        self, transport: ClosableTransport, settings: NatsSettings
    ) -> None:
        nc = await nats.connect(settings.url)
        try:
            await nc.jetstream().delete_stream(settings.stream)
        finally:
            await nc.close()
        with anyio.fail_after(15), pytest.raises(PublishError, match=r"^3 of 3 messages"):
            await transport.publish([envelope(0, sequence=i) for i in range(1, 4)])


@pytest.mark.nats
class TestNatsDeadLetterQueue(DeadLetterQueueContract):
    @pytest.fixture
    def make_queue(self, settings: NatsSettings) -> QueueFactory:
        return lambda: NatsDeadLetterQueue(settings)


@pytest.mark.nats
class TestNatsHistory(HistoryContract):
    @pytest.fixture
    def make_history(self, settings: NatsSettings) -> HistoryFactory:
        return lambda _transport: NatsHistory(settings)

    async def test_a_read_leaves_no_consumer_behind(
        self, history: NatsHistory, slices: object, settings: NatsSettings
    ) -> None:
        nc = await nats.connect(settings.url)
        try:
            names = [c.name for c in await nc.jetstream().consumers_info(settings.stream)]
        finally:
            await nc.close()
        assert not [n for n in names if n.startswith("replay-")]


@pytest.mark.nats
@pytest.mark.anyio
async def test_a_work_queue_stream_is_not_replayable_and_says_how_to_switch(
    settings: NatsSettings,
) -> None:
    workqueue = settings.model_copy(update={"retention": "workqueue"})
    async with NatsTransport(workqueue) as transport:
        await transport.publish([envelope(2)])
    async with NatsHistory(workqueue) as history:
        with pytest.raises(NotReplayableError, match=r"SHOAL_NATS_RETENTION=limits") as caught:
            await read(history, 2, Window(AtPosition(0)))
    assert "acked message is deleted" in str(caught.value)
    assert "SHOAL_NATS_MAX_BYTES" in str(caught.value)


@pytest.mark.nats
@pytest.mark.anyio
async def test_limits_retention_has_the_max_age_and_max_bytes_asked_for(
    settings: NatsSettings,
) -> None:
    capped = settings.model_copy(update={"max_age": 3600.0, "max_bytes": 64 * 1024 * 1024})
    async with NatsTransport(capped):
        pass
    nc = await nats.connect(settings.url)
    try:
        config = (await nc.jetstream().stream_info(settings.stream)).config
    finally:
        await nc.close()
    assert config.retention == js_api.RetentionPolicy.LIMITS
    assert (config.max_age, config.max_bytes) == (3600.0, 64 * 1024 * 1024)


async def _stored(settings: NatsSettings) -> int:
    nc = await nats.connect(settings.url)
    try:
        return int((await nc.jetstream().stream_info(settings.stream)).state.messages)
    finally:
        await nc.close()


def _payload(size: int) -> bytes:
    return json.dumps({"pad": "x" * size}).encode()


@pytest.mark.nats
@pytest.mark.anyio
async def test_a_full_stream_refuses_new_messages_and_drops_none(settings: NatsSettings) -> None:
    capped = settings.model_copy(update={"max_bytes": 64 * 1024})
    accepted = 0
    async with NatsTransport(capped) as transport:
        with pytest.raises(PublishError, match=r"maximum bytes exceeded") as caught:
            for _ in range(200):  # 64 KiB fill in about 60 batches of 1 KiB
                await transport.publish([envelope(0, payload=_payload(1000))])
                accepted += 1
        assert "0 of 1" in str(caught.value) or "refused" in str(caught.value)
    assert 0 < accepted < 200
    assert await _stored(capped) == accepted  # none of the stored ones was dropped


@pytest.mark.nats
@pytest.mark.anyio
async def test_trimming_drops_what_every_consumer_acked_and_nothing_else(
    settings: NatsSettings,
) -> None:
    """Partition 0 has a consumer that acked 3 of its 5 messages; partition 1 has 4
    messages and no consumer yet: only the 3 go, and the 2 unacked are still delivered."""
    capped = settings.model_copy(update={"max_bytes": 1 << 20, "trim_at": 0.0001})
    async with NatsTransport(capped) as transport:
        await publish_each(transport, [envelope(0, sequence=i) for i in range(1, 6)])
        await publish_each(transport, [envelope(1, sequence=i) for i in range(1, 5)])
        first = await transport.open(0, "h1")
        got = await fetch_n(first, 5)
        await first.ack(got[:3])
        await first.close()
        assert await transport.trim_landed(2) == 3
        assert await _stored(capped) == 6
        again = await transport.open(0, "h2")
        left = await fetch_n(again, 2)
        assert [d.envelope.sequence for d in left] == [4, 5]
        await again.close()


@pytest.mark.nats
@pytest.mark.anyio
async def test_below_its_trim_mark_the_stream_keeps_landed_messages_for_replay(
    settings: NatsSettings,
) -> None:
    async with NatsTransport(settings) as transport:  # 1 GiB cap, trim at half of it
        await publish_each(transport, [envelope(0, sequence=i) for i in range(1, 4)])
        sub = await transport.open(0, "h1")
        await sub.ack(await fetch_n(sub, 3))
        await sub.close()
        assert await transport.trim_landed(1) == 0
    assert await _stored(settings) == 3


@pytest.mark.nats
@pytest.mark.anyio
async def test_a_full_stream_takes_messages_again_once_its_landed_ones_are_trimmed(
    settings: NatsSettings,
) -> None:
    capped = settings.model_copy(update={"max_bytes": 32 * 1024, "trim_at": 0.5})
    async with NatsTransport(capped) as transport:
        with pytest.raises(PublishError):
            for _ in range(200):
                await transport.publish([envelope(0, payload=_payload(1000))])
        stored = await _stored(capped)
        sub = await transport.open(0, "h1")
        await sub.ack(await fetch_n(sub, stored))
        await sub.close()
        assert await transport.trim_landed(1) == stored
        await transport.publish([envelope(0, payload=_payload(1000))])
    assert await _stored(capped) == 1


# -- durability: what the server promises, checked at start ---------------------------------


@pytest.mark.nats
@pytest.mark.anyio
async def test_starts_when_the_monitored_server_fsyncs_each_write(
    settings: NatsSettings, nats_server: ServerInfo, caplog: pytest.LogCaptureFixture
) -> None:
    process = local_process(nats_server, "read the monitoring port of")
    assert isinstance(process, RunningNats)
    monitored = settings.model_copy(update={"monitor_url": process.monitor_url})
    with caplog.at_level(logging.INFO, "shoal.adapters.nats"):
        async with NatsTransport(monitored):
            pass
    assert "fsyncs every write" in caplog.text


@pytest.mark.nats
@pytest.mark.anyio
async def test_refuses_to_start_when_a_monitored_server_does_not_fsync_each_write(
    settings: NatsSettings, tmp_path: Path
) -> None:
    server = await anyio.to_thread.run_sync(
        lambda: start_nats(tmp_path / "relaxed", sync_always=False)
    )
    try:
        relaxed = settings.model_copy(update={"url": server.url, "monitor_url": server.monitor_url})
        with pytest.raises(DurabilityError, match="sync_interval"):
            async with NatsTransport(relaxed):
                pass
        nc = await nats.connect(server.url)
        try:  # refused before anything was created
            with pytest.raises(NotFoundError):
                await nc.jetstream().stream_info(settings.stream)
        finally:
            await nc.close()
        accepted = relaxed.model_copy(update={"require_sync_always": False})
        async with NatsTransport(accepted) as transport:  # the operator accepted the risk
            await transport.publish([envelope(0)])
    finally:
        await anyio.to_thread.run_sync(server.stop)


def _stream_info(storage: str, replicas: int, current: list[bool]) -> js_api.StreamInfo:
    info: js_api.StreamInfo = js_api.StreamInfo.from_response(
        {
            "config": {"name": "S", "storage": storage, "num_replicas": replicas},
            "state": {
                "messages": 0,
                "bytes": 0,
                "first_seq": 0,
                "last_seq": 0,
                "consumer_count": 0,
            },
            "cluster": {
                "name": "c",
                "leader": "n1",
                "replicas": [
                    {"name": f"n{i + 2}", "current": ok, "active": 0.1}
                    for i, ok in enumerate(current)
                ],
            },
        }
    )
    return info


def test_a_stream_with_other_storage_or_replicas_than_asked_is_refused() -> None:
    wanted = js_api.StreamConfig(name="S", storage=js_api.StorageType.FILE, num_replicas=3)
    check_stream(_stream_info("file", 3, [True, True]), wanted)
    with pytest.raises(DurabilityError, match="1 replicas; asked for"):
        check_stream(_stream_info("file", 1, []), wanted)
    with pytest.raises(DurabilityError, match="storage"):
        check_stream(_stream_info("memory", 3, [True, True]), wanted)


def test_a_lagging_replica_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    wanted = js_api.StreamConfig(name="S", storage=js_api.StorageType.FILE, num_replicas=3)
    with caplog.at_level(logging.WARNING, "shoal.adapters.nats"):
        check_stream(_stream_info("file", 3, [True, False]), wanted)
    assert "n3 are not current" in caplog.text


@pytest.mark.anyio
@pytest.mark.nats
async def test_a_cluster_name_makes_a_log_of_its_own(settings: NatsSettings) -> None:
    """Multi-datacenter: the same stream name read through two clusters is two logs."""
    east = settings.for_cluster("east", (settings.url,))
    async with NatsTransport(settings) as plain, NatsTransport(east) as named:
        await plain.publish([envelope(3)])
        one, two = await plain.open(3, "a"), await named.open(3, "b")
        assert one.log_id.startswith(f"nats:{settings.stream}@")
        assert two.log_id == one.log_id.replace("nats:", "nats:east/", 1)
        await one.close()
        await two.close()


@pytest.mark.anyio
@pytest.mark.nats
async def test_drained_once_everything_up_to_the_mark_is_acked(settings: NatsSettings) -> None:
    async with NatsTransport(settings) as transport:
        assert await transport.drained(2, await transport.drain_mark(2)) == (True, 0)
        await publish_each(transport, [envelope(2, sequence=i) for i in (1, 2, 3)])
        mark = await transport.drain_mark(2)
        assert await transport.drained(2, mark) == (False, 3)
        subscription = await transport.open(2, "h")
        with anyio.fail_after(10):
            got = list(await subscription.fetch(2, 5.0))
            await subscription.ack(got)
            assert await transport.drained(2, mark) == (False, 1)
            while len(got) < 3:
                got += await subscription.fetch(3 - len(got), 5.0)
            await subscription.ack(got)
        await transport.publish([envelope(2, sequence=4)])  # after the mark: not waited for
        assert (await transport.drained(2, mark))[0]
        await subscription.close()


@pytest.mark.anyio
@pytest.mark.nats
async def test_idle_fetches_share_one_standing_pull_request(settings: NatsSettings) -> None:
    """Twenty short fetches of an idle partition leave one pull request waiting on the
    server (nats-py's fetch sent two per call), and it is served by the next message."""
    async with NatsTransport(settings) as transport:
        subscription = await transport.open(4, "h")
        for _ in range(20):
            assert list(await subscription.fetch(10, 0.05)) == []
        nc = await nats.connect(settings.url)
        try:
            consumer = transport.subjects.consumer_name(4)
            info = await nc.jetstream().consumer_info(settings.stream, consumer)
            assert info.num_waiting == 1
        finally:
            await nc.close()
        await transport.publish([envelope(4, sequence=1)])
        with anyio.fail_after(10):
            got = await fetch_n(subscription, 1)
        await subscription.ack(got)
        await subscription.close()


@pytest.mark.anyio
@pytest.mark.nats
async def test_a_fetch_cancelled_while_it_waits_loses_nothing(settings: NatsSettings) -> None:
    """A fetch cancelled mid-wait (a revoked partition, a shutdown) takes nothing off the
    inbox: what the standing request brings afterwards goes to the next fetch, at once and
    as its first delivery (not after the ack wait, not as a redelivery)."""
    async with NatsTransport(settings) as transport:
        subscription = await transport.open(5, "h")
        with anyio.move_on_after(0.3):
            await subscription.fetch(10, 30.0)
        await transport.publish([envelope(5, sequence=1)])
        with anyio.fail_after(ACK_WAIT / 2):
            got = await fetch_n(subscription, 1)
        assert got[0].attempt == 1
        await subscription.ack(got)
        await subscription.close()


async def _until(check: Callable[[], bool], within: float) -> None:
    """Poll ``check``: the connection state is nats-py's, with no event to await."""
    with anyio.fail_after(within):
        while True:
            if check():
                return
            await anyio.sleep(0.05)


@pytest.mark.nats
@pytest.mark.anyio
async def test_a_cluster_connection_refuses_at_once_while_its_server_is_down(
    settings: NatsSettings, tmp_path: Path
) -> None:
    """Per-cluster settings (``for_cluster``) refuse a publish at once while disconnected,
    so a gateway fails over to another datacenter with nothing in doubt; back once the
    server is."""
    server = await anyio.to_thread.run_sync(lambda: start_nats(tmp_path / "dc"))
    try:
        dc = settings.for_cluster("dc", (server.url,))
        async with NatsTransport(dc) as transport:
            await transport.publish([envelope(1)])
            server.kill()
            await _until(lambda: not transport.connected, 5)  # the client notices the loss
            started = time.monotonic()
            with pytest.raises(PublishError, match="not connected"):
                await transport.publish([envelope(1, sequence=2)])
            assert time.monotonic() - started < 0.5
            await anyio.to_thread.run_sync(server.restart)
            await _until(lambda: transport.connected, 15)
            await transport.publish([envelope(1, sequence=3)])
            assert await transport.backlog(1) == 2
    finally:
        await anyio.to_thread.run_sync(server.stop)
