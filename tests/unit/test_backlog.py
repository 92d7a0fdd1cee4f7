"""``core.backlog``: the backlog alert raises and clears each partition once per crossing,
unreadable partitions keep their state, and the rankings and totals are what they say."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.backlog import (
    backlog_alerts,
    group_backlog,
    merge_top_projects,
    top_projects,
    unacked_age,
)

_partitions = st.integers(0, 7)
_ages = st.none() | st.floats(0, 1000, allow_nan=False)
_looks = st.lists(st.dictionaries(_partitions, _ages, max_size=8), max_size=30)
_thresholds = st.floats(0, 1000, allow_nan=False)


@given(looks=_looks, threshold=_thresholds)
def test_each_crossing_is_raised_once_and_each_recovery_cleared_once(
    looks: list[dict[int, float | None]], threshold: float
) -> None:
    alerting: frozenset[int] = frozenset()
    for ages in looks:
        outcome = backlog_alerts(ages, threshold, alerting)
        for partition in range(8):
            if partition not in ages:  # unreadable: no change either way
                assert (partition in outcome.alerting) == (partition in alerting)
            else:
                age = ages[partition]
                assert (partition in outcome.alerting) == (age is not None and age > threshold)
        # A partition is raised exactly when it starts alerting, cleared when it stops.
        assert set(outcome.raised) == outcome.alerting - alerting
        assert set(outcome.cleared) == alerting - outcome.alerting
        assert list(outcome.raised) == sorted(outcome.raised)
        assert list(outcome.cleared) == sorted(outcome.cleared)
        alerting = outcome.alerting


@given(ages=st.dictionaries(_partitions, _ages, max_size=8), threshold=_thresholds)
def test_a_second_look_at_the_same_ages_changes_nothing(
    ages: dict[int, float | None], threshold: float
) -> None:
    first = backlog_alerts(ages, threshold, frozenset())
    again = backlog_alerts(ages, threshold, first.alerting)
    assert again.alerting == first.alerting
    assert again.raised == again.cleared == ()


def test_the_threshold_itself_does_not_alert_and_a_negative_one_is_refused() -> None:
    assert backlog_alerts({0: 60.0, 1: 60.5}, 60.0, frozenset()).raised == (1,)
    assert backlog_alerts({1: None}, 60.0, frozenset({1})).cleared == (1,)
    with pytest.raises(ValueError, match="negative"):
        backlog_alerts({}, -1.0, frozenset())


def test_an_age_is_never_negative() -> None:
    assert unacked_age(None, 100.0) is None
    assert unacked_age(40.0, 100.0) == 60.0
    assert unacked_age(100.5, 100.0) == 0.0  # the broker's clock a little ahead


@given(
    lags=st.lists(st.none() | st.integers(0, 10**6), max_size=16),
    ages=st.lists(_ages, max_size=16),
)
def test_group_totals_sum_the_known_lags_and_take_the_oldest_age(
    lags: list[int | None], ages: list[float | None]
) -> None:
    totals = group_backlog(lags, ages)
    known = [lag for lag in lags if lag is not None]
    assert totals.total_lag == (sum(known) if known else None)
    assert totals.unknown == lags.count(None)
    known_ages = [a for a in ages if a is not None]
    assert totals.max_oldest_age == (max(known_ages) if known_ages else None)


_counts = st.dictionaries(st.sampled_from([f"p{i}" for i in range(12)]), st.integers(-2, 50))


@given(counts=_counts, k=st.integers(0, 15))
def test_top_projects_are_the_k_largest_positive_counts_in_order(
    counts: dict[str, int], k: int
) -> None:
    ranking = top_projects(counts, k)
    positive = {p: n for p, n in counts.items() if n > 0}
    assert len(ranking) == min(k, len(positive))
    assert all(positive[p] == n for p, n in ranking)
    assert list(ranking) == sorted(ranking, key=lambda pn: (-pn[1], pn[0]))
    if ranking:  # nothing left out counts more than the last one ranked
        _, least = ranking[-1]
        ranked = {p for p, _ in ranking}
        assert all(n <= least for p, n in positive.items() if p not in ranked)


@given(members=st.lists(_counts, max_size=5), k=st.integers(0, 15))
def test_merged_rankings_sum_each_projects_counts(members: list[dict[str, int]], k: int) -> None:
    total: Counter[str] = Counter()
    for counts in members:
        total.update({p: n for p, n in counts.items() if n > 0})
    # Each member reports its whole (positive) counts: the merge is then exact.
    merged = merge_top_projects((top_projects(c, len(c)) for c in members), k)
    assert merged == top_projects(total, k)


def test_a_negative_k_is_refused() -> None:
    with pytest.raises(ValueError, match="negative"):
        top_projects({"a": 1}, -1)
