"""A real Kafka (KRaft) from Maven Central jars, started by infra.local.kafka: readiness,
persistence across kill -9, a three-node quorum, clear errors, cleanup."""

from __future__ import annotations

import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import anyio
import anyio.to_thread
import pytest
from aiokafka import (  # type: ignore[import-untyped, unused-ignore]
    AIOKafkaConsumer,
    AIOKafkaProducer,
    TopicPartition,
)
from aiokafka.admin import AIOKafkaAdminClient, NewTopic  # type: ignore[import-untyped, unused-ignore]

from infra.local import kafka
from infra.local._kafka_dist import default_libs_dir, fetch_kafka, find_java, kafka_libs
from infra.local._kafka_probe import metadata
from infra.local._testservers import ServerInfo, _external
from infra.local.kafka import RunningKafka, new_cluster_id
from infra.local.servers import (
    ServerGroup,
    ServerStartError,
    free_port,
    pid_alive,
    start_kafka,
    start_kafka_cluster,
)
from tests._unavailable import unavailable

pytestmark = pytest.mark.kafka

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module", autouse=True)
def _jars() -> None:
    try:
        kafka_libs()
    except FileNotFoundError as exc:
        unavailable(str(exc))


async def produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True)
    await producer.start()
    try:
        for v in values:
            await producer.send_and_wait(topic, v, partition=0)
    finally:
        await producer.stop()


async def consume(bootstrap: str, topic: str, n: int, limit: float = 20.0) -> list[bytes]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        got: list[bytes] = []
        with anyio.fail_after(limit):
            while len(got) < n:
                batch = await consumer.getmany(tp, timeout_ms=500)
                got.extend(r.value for r in batch.get(tp, []))
        return got
    finally:
        await consumer.stop()


async def create_topic(bootstrap: str, name: str, replication: int = 1) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        response = await admin.create_topics(
            [NewTopic(name, 1, replication, topic_configs={"min.insync.replicas": "1"})]
        )
        assert [e[1] for e in response.topic_errors] == [0]
    finally:
        await admin.close()


def test_cluster_id_is_a_kafka_uuid_in_base64url() -> None:
    ids = {new_cluster_id() for _ in range(50)}
    assert len(ids) == 50
    assert all(re.fullmatch(r"[A-Za-z0-9_-]{22}", i) for i in ids)


def test_fetch_does_nothing_when_the_jars_are_present() -> None:
    start = time.monotonic()
    libs, fetched = fetch_kafka()
    assert (libs, fetched) == (default_libs_dir(), False)
    assert time.monotonic() - start < 1.0
    names = {p.name for p in libs.glob("*.jar")}
    assert {"kafka_2.13-4.1.2.jar", "kafka-server-4.1.2.jar", "log4j-slf4j-impl-2.24.3.jar"} <= (
        names
    )


def test_metadata_probe_is_none_when_nothing_listens() -> None:
    assert metadata("127.0.0.1", free_port(), timeout=0.5) is None


@pytest.mark.anyio
async def test_kafka_keeps_acked_messages_when_killed_and_restarted() -> None:
    with anyio.fail_after(120):
        async with ServerGroup() as group:
            started = time.monotonic()
            kafka: RunningKafka = await group.astart(start_kafka)
            took = time.monotonic() - started
            print(f"kafka start (format + JVM + ready): {took:.2f} s")
            assert kafka.bootstrap == f"127.0.0.1:{kafka.port}" == kafka.url
            view = metadata("127.0.0.1", kafka.port)
            assert view is not None and view.brokers == {1: ("127.0.0.1", kafka.port)}
            assert view.cluster_id == kafka.cluster_id
            await create_topic(kafka.bootstrap, "t")
            values = [f"m{i}".encode() for i in range(20)]
            await produce(kafka.bootstrap, "t", values)
            pid = kafka.pid
            kafka.kill()
            assert pid is not None and not pid_alive(pid)
            started = time.monotonic()
            await anyio.to_thread.run_sync(kafka.restart)
            print(f"kafka restart after kill -9: {time.monotonic() - started:.2f} s")
            assert await consume(kafka.bootstrap, "t", 20) == values
            data_dir = kafka.data_dir
        assert not data_dir.exists()


def test_start_fails_with_the_log_when_the_config_is_invalid() -> None:
    with pytest.raises(ServerStartError, match=r"(?s)kafka storage format failed.*output:"):
        start_kafka(config={"log.retention.hours": "not-a-number"}, timeout=60)


def test_start_fails_with_the_log_tail_when_the_jvm_exits(tmp_path: Path) -> None:
    with pytest.raises(
        ServerStartError, match=r"(?s)exited with code 1 before it was ready.*NoSuchOption"
    ):
        start_kafka(tmp_path / "k", jvm_args=["-XX:+NoSuchOption"], timeout=60)
    assert (tmp_path / "k" / "data" / "meta.properties").is_file()  # a given dir is kept


@pytest.mark.anyio
async def test_three_node_cluster_keeps_serving_when_one_node_is_killed() -> None:
    with anyio.fail_after(180):
        async with ServerGroup() as group:
            started = time.monotonic()
            cluster = await group.astart(start_kafka_cluster, 3, heap=("128m", "384m"))
            print(f"3-node kafka cluster ready: {time.monotonic() - started:.2f} s")
            assert len(cluster.bootstrap.split(",")) == 3
            controller = cluster.leader()
            assert controller is not None
            await create_topic(cluster.bootstrap, "r3", replication=3)
            await produce(cluster.bootstrap, "r3", [b"a", b"b"])
            victim = next(s for s in cluster.servers if s is not controller)
            victim.kill()
            rest = ",".join(s.bootstrap for s in cluster.servers if s is not victim)
            await produce(rest, "r3", [b"c"])
            assert await consume(rest, "r3", 3) == [b"a", b"b", b"c"]
            await anyio.to_thread.run_sync(victim.restart)
            assert victim.running()


def test_external_mode_reads_the_bootstrap_servers() -> None:
    env = {"SHOAL_TEST_KAFKA_BOOTSTRAP": "kafka://10.0.0.1:9092, 10.0.0.2:9093"}
    info = _external("kafka", env)
    assert (info.url, info.endpoints) == (
        "10.0.0.1:9092,10.0.0.2:9093",
        ["10.0.0.1:9092", "10.0.0.2:9093"],
    )


def test_cli_prints_the_bootstrap_and_stops_on_sigterm() -> None:
    cmd = [sys.executable, "-m", "infra.local.servers", "kafka"]
    with subprocess.Popen(
        cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    ) as proc:
        lines: queue.Queue[str] = queue.Queue()

        def pump() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                lines.put(line)

        threading.Thread(target=pump, daemon=True).start()
        try:
            first = lines.get(timeout=90)
            export = lines.get(timeout=5)
        except queue.Empty:
            proc.kill()
            raise
        m = re.search(r"^kafka: 127\.0\.0\.1:(\d+) .*pid (\d+)", first)
        assert m, first
        port, pid = int(m[1]), int(m[2])
        assert export.strip() == (
            f"export SHOAL_KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:{port}"
            f" SHOAL_TEST_KAFKA_BOOTSTRAP=127.0.0.1:{port}"
        )
        assert metadata("127.0.0.1", port) is not None
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    assert not pid_alive(pid)


def test_session_fixture_serves_a_ready_broker(kafka_server: ServerInfo) -> None:
    host, _, port = kafka_server.endpoints[0].rpartition(":")
    view = metadata(host, int(port))
    assert view is not None and view.brokers and view.controller_id >= 0
    if kafka_server.mode == "local":
        assert kafka_server.process is not None and kafka_server.process.running()


def test_storage_format_takes_a_cluster_id_that_starts_with_a_dash(tmp_path: Path) -> None:
    """Kafka's argparse would read "-Sk..." as an option: one cluster id in 64 starts so."""
    (tmp_path / "server.properties").write_text(
        "process.roles=broker,controller\nnode.id=1\n"
        "controller.quorum.voters=1@127.0.0.1:1\n"
        "listeners=PLAINTEXT://127.0.0.1:2,CONTROLLER://127.0.0.1:1\n"
        "controller.listener.names=CONTROLLER\n"
        f"log.dirs={tmp_path / 'data'}\n"
    )
    kafka._format(find_java(), kafka_libs(), tmp_path, "-SkMfWCAR5ya4bpNlIbfzQ")
    assert "-SkMfWCAR5ya4bpNlIbfzQ" in (tmp_path / "data" / "meta.properties").read_text()
