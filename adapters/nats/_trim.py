"""Which messages of the data stream every consumer has acked, per partition.

With limits retention, acked (landed) messages stay until ``max_age``; with a size cap and
``discard: new`` they would fill the stream and stop the gateway although nothing is
waiting. The active leader therefore drops, once the stream passes ``trim_at`` of its cap,
every message below the lowest ack floor of the consumers that read its partition
(``NatsTransport.trim_landed``). A consumer whose filters are not one partition's (a tool
reading the whole stream) holds every partition back: nothing it has not acked is dropped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from core.model import Partition

__all__ = ["ConsumerFloor", "partition_floors"]


@dataclass(frozen=True)
class ConsumerFloor:
    name: str
    filters: frozenset[str]
    acked_through: int  # stream sequence: every message of its filters up to it is acked


def partition_floors(
    consumers: Iterable[ConsumerFloor],
    partitions: int,
    filters_of: Callable[[Partition], Sequence[str]],
) -> dict[Partition, tuple[int, str]]:
    """For each partition that has a consumer: the stream sequence up to which every
    consumer reading it has acked, and the consumer that holds it there (for the log)."""
    owner = {frozenset(filters_of(p)): p for p in range(partitions)}
    floors: dict[Partition, tuple[int, str]] = {}
    everywhere: list[ConsumerFloor] = []
    for consumer in consumers:
        partition = owner.get(consumer.filters)
        if partition is None:
            everywhere.append(consumer)
            continue
        known = floors.get(partition)
        if known is None or consumer.acked_through < known[0]:
            floors[partition] = (consumer.acked_through, consumer.name)
    for consumer in everywhere:
        for partition, (floor, _) in floors.items():
            if consumer.acked_through < floor:
                floors[partition] = (consumer.acked_through, consumer.name)
    return floors
