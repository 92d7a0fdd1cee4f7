"""The plain-client baselines of the pipeline benchmark: no shoal code, only nats-py and
aiokafka, run as separate processes (one producer, two consumers, as shoal runs one
gateway and two handlers).

    python -m tests.bench._raw nats-setup    URL STREAM PARTITIONS
    python -m tests.bench._raw nats-consume  URL STREAM FIRST LAST GOAL
    python -m tests.bench._raw nats-produce  URL STREAM PARTITIONS MESSAGES SIZE
    python -m tests.bench._raw kafka-setup   SERVERS TOPIC PARTITIONS
    python -m tests.bench._raw kafka-consume SERVERS TOPIC FIRST LAST GOAL
    python -m tests.bench._raw kafka-produce SERVERS TOPIC PARTITIONS MESSAGES SIZE

Message ``i`` goes to partition ``i % PARTITIONS``, so the caller knows how many messages
(GOAL, ``share``) a consumer of partitions FIRST..LAST must see. A consumer prints
``ready`` once subscribed and ``done <unix time>`` after acking (committing) its last
message; a producer prints ``started <unix time>``.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable
from typing import Any

import nats
from aiokafka import (  # type: ignore[import-untyped, unused-ignore]
    AIOKafkaConsumer,
    AIOKafkaProducer,
    TopicPartition,
)
from aiokafka.admin import (  # type: ignore[import-untyped, unused-ignore]
    AIOKafkaAdminClient,
    NewTopic,
)
from nats.js import api

FETCH = 256


def share(messages: int, partitions: int, first: int, last: int) -> int:
    """How many of ``messages`` (message i on partition i % partitions) land on first..last."""
    return sum(len(range(p, messages, partitions)) for p in range(first, last + 1))


def _say(line: str) -> None:
    print(line, flush=True)


def _subject(stream: str, partition: int) -> str:
    return f"{stream.lower()}.p{partition}"


async def nats_setup(url: str, stream: str, partitions: int) -> None:
    nc = await nats.connect(url)
    js = nc.jetstream()
    await js.add_stream(
        api.StreamConfig(
            name=stream,
            subjects=[f"{stream.lower()}.*"],
            storage=api.StorageType.FILE,
            retention=api.RetentionPolicy.LIMITS,
        )
    )
    for p in range(partitions):
        await js.add_consumer(
            stream,
            api.ConsumerConfig(
                durable_name=f"p{p}",
                filter_subject=_subject(stream, p),
                ack_policy=api.AckPolicy.EXPLICIT,
                max_ack_pending=50_000,
            ),
        )
    await nc.close()


async def nats_consume(url: str, stream: str, first: int, last: int, goal: int) -> None:
    nc = await nats.connect(url)
    js = nc.jetstream()
    subs = [
        await js.pull_subscribe_bind(durable=f"p{p}", stream=stream) for p in range(first, last + 1)
    ]
    left = [goal]
    done = asyncio.Event()

    async def drain(sub: nats.js.JetStreamContext.PullSubscription) -> None:
        while not done.is_set():
            try:
                msgs = await sub.fetch(FETCH, timeout=1.0)
            except nats.errors.TimeoutError:
                continue
            for msg in msgs:
                await msg.ack()
            left[0] -= len(msgs)
            if left[0] <= 0:
                await nc.flush()
                done.set()

    _say("ready")
    tasks = [asyncio.create_task(drain(s)) for s in subs]
    await done.wait()
    _say(f"done {time.time()}")
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await nc.close()


async def nats_produce(url: str, stream: str, partitions: int, messages: int, size: int) -> None:
    nc = await nats.connect(url)
    js = nc.jetstream()
    payload = b"x" * size
    _say(f"started {time.time()}")
    window: list[asyncio.Future[Any]] = []
    for i in range(messages):
        window.append(await js.publish_async(_subject(stream, i % partitions), payload))
        if len(window) >= 4000:
            await asyncio.gather(*window)
            window.clear()
    await asyncio.gather(*window)
    await nc.close()


async def kafka_setup(servers: str, topic: str, partitions: int) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=servers)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, partitions, 1)])
    finally:
        await admin.close()


async def kafka_consume(servers: str, topic: str, first: int, last: int, goal: int) -> None:
    consumer = AIOKafkaConsumer(
        bootstrap_servers=servers,
        group_id=f"{topic}-raw",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        max_poll_records=FETCH * 8,
    )
    await consumer.start()
    consumer.assign([TopicPartition(topic, p) for p in range(first, last + 1)])
    _say("ready")
    left = goal
    while left > 0:
        batch = await consumer.getmany(timeout_ms=1000, max_records=FETCH * 8)
        got = sum(len(records) for records in batch.values())
        if got:
            await consumer.commit()
            left -= got
    _say(f"done {time.time()}")
    await consumer.stop()


async def kafka_produce(
    servers: str, topic: str, partitions: int, messages: int, size: int
) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=servers, acks="all")
    await producer.start()
    payload = b"x" * size
    _say(f"started {time.time()}")
    window: list[asyncio.Future[Any]] = []
    for i in range(messages):
        window.append(await producer.send(topic, payload, partition=i % partitions))
        if len(window) >= 4000:
            await asyncio.gather(*window)
            window.clear()
    await asyncio.gather(*window)
    await producer.stop()


def main() -> None:
    command, *args = sys.argv[1:]
    runs: dict[str, Callable[[], object]] = {
        "nats-setup": lambda: nats_setup(args[0], args[1], int(args[2])),
        "nats-consume": lambda: nats_consume(
            args[0], args[1], int(args[2]), int(args[3]), int(args[4])
        ),
        "nats-produce": lambda: nats_produce(
            args[0], args[1], int(args[2]), int(args[3]), int(args[4])
        ),
        "kafka-setup": lambda: kafka_setup(args[0], args[1], int(args[2])),
        "kafka-consume": lambda: kafka_consume(
            args[0], args[1], int(args[2]), int(args[3]), int(args[4])
        ),
        "kafka-produce": lambda: kafka_produce(
            args[0], args[1], int(args[2]), int(args[3]), int(args[4])
        ),
    }
    asyncio.run(runs[command]())  # type: ignore[arg-type]


if __name__ == "__main__":
    main()
