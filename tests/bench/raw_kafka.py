"""The plain aiokafka baseline of the pipeline benchmark: no shoal code, run as separate
processes (one producer, two consumers, as shoal runs one gateway and two handlers).

    python -m tests.bench.raw_kafka setup   SERVERS TOPIC PARTITIONS
    python -m tests.bench.raw_kafka consume SERVERS TOPIC FIRST LAST GOAL
    python -m tests.bench.raw_kafka produce SERVERS TOPIC PARTITIONS MESSAGES SIZE

A topic of PARTITIONS partitions (replication 1). The producer (``acks="all"``, default
batching) sends message ``i`` to partition ``i % PARTITIONS`` with a per-message ``send``
(at most 4,000 unanswered); a consumer ``assign()``s partitions FIRST..LAST and runs
``getmany`` + ``commit`` until it has seen GOAL messages (from the end of each partition
as it was when the consumer started: the setup's probe writes do not count). A consumer
prints ``ready <cpu>`` once assigned and ``done <unix time> <cpu>`` after its last commit;
the producer prints ``started <unix time> <cpu>`` before its first send and ``finished
<cpu>`` after its last confirmation (``cpu``: the process's CPU seconds so far).
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from typing import Any

from aiokafka import (  # type: ignore[import-untyped, unused-ignore]
    AIOKafkaConsumer,
    AIOKafkaProducer,
    TopicPartition,
)
from aiokafka.admin import (  # type: ignore[import-untyped, unused-ignore]
    AIOKafkaAdminClient,
    NewTopic,
)

MAX_RECORDS = 2_048  # per getmany
WINDOW = 4_000  # unanswered sends


def say(line: str) -> None:
    print(line, flush=True)


def group(topic: str) -> str:
    return f"{topic}-raw"


async def setup(servers: str, topic: str, partitions: int) -> None:
    """Create the topic and return once every partition took a write: a producer that
    starts earlier gets NotLeaderForPartition answers (retried: a slower baseline), even
    after the metadata lists every leader. Consumers start after these probes."""
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)  # retries while it settles
    admin = AIOKafkaAdminClient(bootstrap_servers=servers)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, partitions, 1)])
    finally:
        await admin.close()
    producer = AIOKafkaProducer(bootstrap_servers=servers)
    await producer.start()
    try:
        async with asyncio.timeout(60):
            while True:
                await producer.client.force_metadata_update()
                led = producer.client.cluster.available_partitions_for_topic(topic)
                if led is not None and len(led) == partitions:
                    break
                await asyncio.sleep(0.2)
            probes = [await producer.send(topic, b"", partition=p) for p in range(partitions)]
            ends = {TopicPartition(topic, p): (await f).offset + 1 for p, f in enumerate(probes)}
    finally:
        await producer.stop()
    # The consumers' group starts after the probes, and its coordinator is up before the
    # timed run (its first lookup otherwise fails and is retried inside the run).
    consumer = AIOKafkaConsumer(
        bootstrap_servers=servers, group_id=group(topic), enable_auto_commit=False
    )
    await consumer.start()
    try:
        consumer.assign(list(ends))
        await consumer.commit(ends)
    finally:
        await consumer.stop()


async def consume(servers: str, topic: str, first: int, last: int, goal: int) -> None:
    consumer = AIOKafkaConsumer(
        bootstrap_servers=servers,
        group_id=group(topic),
        enable_auto_commit=False,
        auto_offset_reset="latest",  # after the setup's probes
        max_poll_records=MAX_RECORDS,
    )
    await consumer.start()
    assigned = [TopicPartition(topic, p) for p in range(first, last + 1)]
    consumer.assign(assigned)
    for tp in assigned:
        await consumer.position(tp)  # resolve "latest" now, before the producer starts
    say(f"ready {time.process_time()}")
    left = goal
    while left > 0:
        batch = await consumer.getmany(timeout_ms=1000, max_records=MAX_RECORDS)
        got = sum(len(records) for records in batch.values())
        if got:
            await consumer.commit()
            left -= got
    say(f"done {time.time()} {time.process_time()}")
    await consumer.stop()


async def produce(servers: str, topic: str, partitions: int, messages: int, size: int) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=servers, acks="all")
    await producer.start()
    payload = b"x" * size
    say(f"started {time.time()} {time.process_time()}")
    window: list[asyncio.Future[Any]] = []
    for i in range(messages):
        window.append(await producer.send(topic, payload, partition=i % partitions))
        if len(window) >= WINDOW:
            await asyncio.gather(*window)
            window.clear()
    await asyncio.gather(*window)
    say(f"finished {time.process_time()}")
    await producer.stop()


def main(argv: list[str] | None = None) -> None:
    command, *args = sys.argv[1:] if argv is None else argv
    if command == "setup":
        asyncio.run(setup(args[0], args[1], int(args[2])))
    elif command == "consume":
        asyncio.run(consume(args[0], args[1], int(args[2]), int(args[3]), int(args[4])))
    elif command == "produce":
        asyncio.run(produce(args[0], args[1], int(args[2]), int(args[3]), int(args[4])))
    else:
        raise SystemExit(f"unknown command {command!r}: setup, consume or produce")


if __name__ == "__main__":
    main()
