"""The plain nats-py baseline of the pipeline benchmark: no shoal code, run as separate
processes (one producer, two consumers, as shoal runs one gateway and two handlers).

    python -m tests.bench.raw_nats setup   URL STREAM PARTITIONS
    python -m tests.bench.raw_nats consume URL STREAM FIRST LAST GOAL
    python -m tests.bench.raw_nats produce URL STREAM PARTITIONS MESSAGES SIZE

A file-storage stream over PARTITIONS subjects ``<stream>.p<n>``, one durable pull consumer
per subject. The producer publishes message ``i`` to subject ``i % PARTITIONS`` with a
per-message ``js.publish_async`` (at most 4,000 unanswered); a consumer of subjects
FIRST..LAST runs one ``fetch(256)`` loop per consumer and ``msg.ack()``s each message
until it has seen GOAL messages. A consumer prints ``ready <cpu>`` once bound and
``done <unix time> <cpu>`` after its last ack is flushed; the producer prints
``started <unix time> <cpu>`` before its first publish and ``finished <cpu>`` after its
last confirmation (``cpu``: the process's CPU seconds so far, ``time.process_time``).
"""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Any

import nats
import nats.errors
from nats.js import JetStreamContext, api

FETCH = 256
WINDOW = 4_000  # unanswered publishes


def say(line: str) -> None:
    print(line, flush=True)


def subject(stream: str, partition: int) -> str:
    return f"{stream.lower()}.p{partition}"


async def setup(url: str, stream: str, partitions: int) -> None:
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
                filter_subject=subject(stream, p),
                ack_policy=api.AckPolicy.EXPLICIT,
                max_ack_pending=50_000,
            ),
        )
    await nc.close()


async def consume(url: str, stream: str, first: int, last: int, goal: int) -> None:
    nc = await nats.connect(url)
    js = nc.jetstream()
    subs = [
        await js.pull_subscribe_bind(durable=f"p{p}", stream=stream) for p in range(first, last + 1)
    ]
    left = [goal]
    done = asyncio.Event()

    async def drain(sub: JetStreamContext.PullSubscription) -> None:
        while not done.is_set():
            try:
                msgs = await sub.fetch(FETCH, timeout=1.0)
            except (nats.errors.TimeoutError, TimeoutError):
                continue
            for msg in msgs:
                await msg.ack()
            left[0] -= len(msgs)
            if left[0] <= 0:
                await nc.flush()
                done.set()

    say(f"ready {time.process_time()}")
    tasks = [asyncio.create_task(drain(s)) for s in subs]
    await done.wait()
    say(f"done {time.time()} {time.process_time()}")
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await nc.close()


async def produce(url: str, stream: str, partitions: int, messages: int, size: int) -> None:
    nc = await nats.connect(url)
    js = nc.jetstream()
    payload = b"x" * size
    say(f"started {time.time()} {time.process_time()}")
    window: list[asyncio.Future[Any]] = []
    for i in range(messages):
        window.append(await js.publish_async(subject(stream, i % partitions), payload))
        if len(window) >= WINDOW:
            await asyncio.gather(*window)
            window.clear()
    await asyncio.gather(*window)
    say(f"finished {time.process_time()}")
    await nc.close()


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
