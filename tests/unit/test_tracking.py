"""``core.tracking``: the gateway's bounded per-project memory never hands out a
(series, project, sequence) twice and never holds more than its bound."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.tracking import RecentSet, SeriesCounters, series_id

_requests = st.lists(
    st.tuples(st.sampled_from([f"p{i}" for i in range(8)]), st.integers(1, 5)), max_size=200
)


@given(requests=_requests, bound=st.integers(1, 6))
def test_no_sequence_is_handed_out_twice_and_memory_stays_bounded(
    requests: list[tuple[str, int]], bound: int
) -> None:
    counters = SeriesCounters("gw", bound)
    handed: set[tuple[str, str, int]] = set()
    last: dict[tuple[str, str], int] = {}
    for project, count in requests:
        series, first = counters.reserve(project, count)
        assert len(counters) <= bound
        # a series is numbered 1..N contiguously: it starts at 1 or goes on where it stopped
        assert first == last.get((series, project), 0) + 1
        last[(series, project)] = first + count - 1
        for sequence in range(first, first + count):
            assert (series, project, sequence) not in handed
            handed.add((series, project, sequence))


def test_an_evicted_project_comes_back_in_a_new_series() -> None:
    counters = SeriesCounters("gw", 2)
    assert counters.reserve("a", 3) == ("gw", 1)
    assert counters.reserve("b", 1) == ("gw", 1)
    assert counters.reserve("a", 1) == ("gw", 4)  # a is now the most recent
    assert counters.reserve("c", 1) == ("gw", 1)  # b is evicted
    assert "b" not in counters
    assert counters.reserve("b", 2) == (series_id("gw", 1), 1)  # a is evicted
    assert counters.reserve("a", 1) == ("gw~2", 1)
    assert counters.evictions == 3


def test_bounds_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_tracked"):
        SeriesCounters("gw", 0)
    with pytest.raises(ValueError, match="max_size"):
        RecentSet(0)


@given(items=st.lists(st.sampled_from("abcdefgh")), bound=st.integers(1, 5))
def test_recent_set_keeps_the_most_recent_within_its_bound(items: list[str], bound: int) -> None:
    recent = RecentSet(bound)
    for at, item in enumerate(items):
        recent.add(item, float(at))
        assert item in recent
        assert recent.added_at(item) == at
        assert len(recent) <= bound
    newest = list(dict.fromkeys(reversed(items)))[:bound]
    assert all(item in recent for item in newest)
    assert len(recent) == len(newest)
