"""``core.retry.Excusals``: redeliveries shoal gave back itself are not counted, a crash's
are, and the record stays bounded without ever excusing more than its spans say."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from core.retry import MAX_EXCUSALS, Excusals, deliveries_exhausted

_positions = st.integers(0, 200)
_spans = st.lists(st.tuples(_positions, _positions), max_size=2 * MAX_EXCUSALS)


def _record(spans: list[tuple[int, int]]) -> Excusals:
    record = Excusals()
    for low, high in spans:
        record = record.excusing(low, high)
    return record


@given(spans=_spans, position=_positions)
def test_a_position_is_excused_once_per_span_that_covers_it(
    spans: list[tuple[int, int]], position: int
) -> None:
    record = _record(spans)
    kept = [(low, high) for low, high in spans if low <= high][-MAX_EXCUSALS:]
    assert record.spans == tuple(kept)
    assert record.excused(position) == sum(1 for low, high in kept if low <= position <= high)


@given(spans=_spans, position=_positions, delivered=st.integers(1, 500))
def test_the_counted_attempt_is_between_1_and_the_deliveries(
    spans: list[tuple[int, int]], position: int, delivered: int
) -> None:
    attempt = _record(spans).attempt(delivered, position)
    assert 1 <= attempt <= delivered
    assert attempt == max(1, delivered - _record(spans).excused(position))


@given(spans=_spans, floor=_positions, position=_positions)
def test_pruning_below_the_floor_keeps_every_excusal_at_or_above_it(
    spans: list[tuple[int, int]], floor: int, position: int
) -> None:
    record = _record(spans)
    pruned = record.above(floor)
    assert all(high >= floor for _, high in pruned.spans)
    if position >= floor:
        assert pruned.excused(position) == record.excused(position)


@given(spans=_spans, low=_positions, high=_positions, position=_positions)
def test_a_full_record_drops_its_oldest_span_so_it_never_excuses_more(
    spans: list[tuple[int, int]], low: int, high: int, position: int
) -> None:
    record = _record(spans)
    grown = record.excusing(low, high)
    assert len(grown.spans) <= MAX_EXCUSALS
    assert grown.excused(position) <= record.excused(position) + (low <= position <= high)


@given(
    rebalances=st.integers(1, MAX_EXCUSALS),
    crashes=st.integers(0, 20),
    max_deliver=st.integers(1, 10),
)
def test_rebalances_spend_no_attempt_and_crashes_spend_one_each(
    rebalances: int, crashes: int, max_deliver: int
) -> None:
    """A held message given back by ``rebalances`` closes and ``crashes`` crashes (which
    write nothing): its next delivery counts the crashes only."""
    position, record, delivered = 17, Excusals(), 1
    for _ in range(rebalances):
        record = record.excusing(3, 40)  # the close held positions 3..40
        delivered += 1
    delivered += crashes
    attempt = record.attempt(delivered, position)
    assert attempt == 1 + crashes
    assert deliveries_exhausted(attempt, max_deliver) == (crashes >= max_deliver)


def test_an_empty_span_excuses_nothing() -> None:
    assert Excusals().excusing(5, 4) == Excusals()
    assert Excusals().attempt(3, 5) == 3
