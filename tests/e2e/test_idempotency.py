"""``Idempotency-Key`` across real gateway processes: a request answered by gateway A is
retried after A was SIGKILLed (a crash, then a restart) and against another gateway
process B: 200 with the same message ids, and the broker holds the request's messages
once (NATS: the stream's count on the project's data subject; Kafka: the partition's end
offset, the gateways' announcements aside)."""

from __future__ import annotations

import signal
from collections.abc import Callable
from typing import Any

import anyio
import httpx
import pytest

from adapters.kafka._aiokafka import AIOKafkaConsumer, TopicPartition
from core.partitioning import partition_for
from tests._stored import stored_messages
from tests.e2e._cluster import Cluster

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]

PROJECT = "dev-idem"
BODY = b'{"n": 1}\n{"n": 2}\n{"n": 3}\n{"n": 4}'
HEADERS = {"Idempotency-Key": "upload-2026-11-26T08:00Z"}


async def _post(url: str) -> httpx.Response:
    async with httpx.AsyncClient(timeout=10.0, trust_env=False) as client:
        return await client.post(
            f"{url}/v1/projects/{PROJECT}/messages", content=BODY, headers=HEADERS
        )


async def _retried_across_processes(cluster: Cluster) -> dict[str, Any]:
    a = await cluster.start_gateway("gw-a")
    first = await _post(a.url)
    assert first.status_code == 202, first.text
    cluster.kill("gw-a", signal.SIGKILL)
    await cluster.wait_exit("gw-a", 10)
    restarted = await cluster.start_gateway("gw-a2")  # A again, as a new process
    b = await cluster.start_gateway("gw-b")
    for gateway in (restarted, b):
        again = await _post(gateway.url)
        assert again.status_code == 200, again.text
        assert again.headers["Idempotent-Replayed"] == "true"
        assert again.json() == first.json()
    answer: dict[str, Any] = first.json()
    return answer


@pytest.mark.nats
async def test_a_retry_after_a_crash_or_to_another_gateway_lands_once_on_nats(
    make_cluster: Callable[..., Cluster],
) -> None:
    cluster = make_cluster("idem-nats", coordination="etcd", transport="nats")
    async with cluster:
        with anyio.fail_after(60):
            answer = await _retried_across_processes(cluster)
            env = cluster._env
            partition = partition_for(PROJECT, cluster.partitions)
            subject = f"{env['SHOAL_NATS_SUBJECT_PREFIX']}.p{partition}.{PROJECT}.data"
            stored = await stored_messages(env["SHOAL_NATS_URL"], env["SHOAL_NATS_STREAM"], subject)
            assert stored == answer["accepted"] == 4


@pytest.mark.kafka
async def test_a_retry_after_a_crash_or_to_another_gateway_lands_once_on_kafka(
    make_cluster: Callable[..., Cluster],
) -> None:
    cluster = make_cluster("idem-kafka", coordination="kafka", transport="kafka")
    async with cluster:
        with anyio.fail_after(60):
            answer = await _retried_across_processes(cluster)
            env = cluster._env
            consumer = AIOKafkaConsumer(bootstrap_servers=env["SHOAL_KAFKA_BOOTSTRAP_SERVERS"])
            await consumer.start()
            try:
                tp = TopicPartition(
                    env["SHOAL_KAFKA_TOPIC"], partition_for(PROJECT, cluster.partitions)
                )
                end = int((await consumer.end_offsets([tp]))[tp])
            finally:
                await consumer.stop()
            # one announcement (gateway A's) and one pack of the request's 4 messages
            # (core.packing): the replays published nothing
            assert answer["accepted"] == 4
            assert end == 1 + 1
