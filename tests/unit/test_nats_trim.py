"""Which messages of a partition every consumer has acked (``adapters.nats._trim``)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from adapters.nats._subjects import Subjects
from adapters.nats._trim import ConsumerFloor, partition_floors

SUBJECTS = Subjects("shoal.data", "shoal.dlq")
PARTITIONS = 4


def _consumer(name: str, partition: int | None, floor: int) -> ConsumerFloor:
    filters = () if partition is None else SUBJECTS.consumer_filters(partition)
    return ConsumerFloor(name, frozenset(filters), floor)


def test_a_partition_is_held_at_its_slowest_consumer_and_one_without_is_left_alone() -> None:
    floors = partition_floors(
        [_consumer("p0", 0, 40), _consumer("p0-copy-a", 0, 25), _consumer("p2", 2, 7)],
        PARTITIONS,
        SUBJECTS.consumer_filters,
    )
    assert floors == {0: (25, "p0-copy-a"), 2: (7, "p2")}


def test_a_consumer_of_the_whole_stream_holds_every_partition_back() -> None:
    floors = partition_floors(
        [_consumer("p0", 0, 40), _consumer("p1", 1, 3), _consumer("reader", None, 10)],
        PARTITIONS,
        SUBJECTS.consumer_filters,
    )
    assert floors == {0: (10, "reader"), 1: (3, "p1")}


consumers = st.lists(
    st.tuples(st.one_of(st.none(), st.integers(0, PARTITIONS - 1)), st.integers(0, 1000)),
    max_size=12,
)


@given(consumers)
def test_no_floor_passes_a_consumer_that_reads_its_partition(
    drawn: list[tuple[int | None, int]],
) -> None:
    """The point of the rule: nothing a consumer of the partition has not acked is below
    the floor, and a partition no partition consumer reads gets none."""
    listed = [_consumer(f"c{i}", p, f) for i, (p, f) in enumerate(drawn)]
    floors = partition_floors(listed, PARTITIONS, SUBJECTS.consumer_filters)
    assert set(floors) == {p for p, _ in drawn if p is not None}
    for partition, (floor, _) in floors.items():
        readers = [f for p, f in drawn if p in (partition, None)]
        assert floor == min(readers)
