"""``core.replay``: reading ``--from``/``--to`` and which stored messages a window holds."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.replay import (
    AtPosition,
    AtTime,
    BadWindowError,
    Bound,
    Place,
    Window,
    parse_bound,
    window_of,
)

NOW = 1_790_000_000.0
nows = st.floats(min_value=0, max_value=4e9, allow_nan=False)
positions = st.integers(min_value=0, max_value=2**63)
epochs = st.floats(min_value=0, max_value=4e9, allow_nan=False)
bounds: st.SearchStrategy[Bound] = st.one_of(positions.map(AtPosition), epochs.map(AtTime))
moments = st.datetimes(
    min_value=datetime(1971, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC)
)


@given(positions, nows)
def test_an_integer_is_a_position(n: int, now: float) -> None:
    assert parse_bound(str(n), now=now) == AtPosition(n)


@given(st.integers(min_value=0, max_value=10**6), st.sampled_from("smhd"), nows)
def test_a_relative_time_counts_back_from_now(amount: int, unit: str, now: float) -> None:
    seconds = {"s": 1, "m": 60, "h": 3600, "d": 86400}[unit]
    assert parse_bound(f"-{amount}{unit}", now=now) == AtTime(now - amount * seconds)


def test_a_relative_time_may_have_decimals() -> None:
    assert parse_bound("-1.5h", now=NOW) == AtTime(NOW - 5400)


@given(moments, nows)
def test_an_iso_time_is_read_whatever_now_is(moment: datetime, now: float) -> None:
    assert parse_bound(moment.isoformat(), now=now) == AtTime(moment.timestamp())
    naive = moment.replace(tzinfo=None).isoformat()
    assert parse_bound(naive, now=now) == AtTime(moment.timestamp()), "no zone means UTC"


def test_an_iso_time_in_another_zone_or_with_z_is_the_same_instant() -> None:
    instant = datetime(2026, 1, 31, 12, tzinfo=UTC).timestamp()
    assert parse_bound("2026-01-31T12:00:00Z", now=NOW) == AtTime(instant)
    assert parse_bound("2026-01-31T13:00:00+01:00", now=NOW) == AtTime(instant)


@pytest.mark.parametrize(
    "text", ["", "yesterday", "-10", "-10x", "10m", "+10m", "-m", "2026-13-01", "1.5", "²", "-1e3s"]
)
def test_anything_else_is_refused_saying_what_is_accepted(text: str) -> None:
    with pytest.raises(BadWindowError, match="ISO-8601"):
        parse_bound(text, now=NOW)


@given(bounds, bounds)
def test_a_window_of_one_kind_is_refused_only_when_it_ends_before_it_starts(
    a: Bound, b: Bound
) -> None:
    def spell(bound: Bound) -> str:
        if isinstance(bound, AtPosition):
            return str(bound.position)
        return datetime.fromtimestamp(bound.epoch, UTC).isoformat()

    start, end = spell(a), spell(b)
    first, last = parse_bound(start, now=NOW), parse_bound(end, now=NOW)
    backwards = (
        isinstance(first, AtPosition)
        and isinstance(last, AtPosition)
        and last.position < first.position
    ) or (isinstance(first, AtTime) and isinstance(last, AtTime) and last.epoch < first.epoch)
    if backwards:
        with pytest.raises(BadWindowError, match="is before --from"):
            window_of(start, end, now=NOW)
    else:
        assert window_of(start, end, now=NOW) == Window(first, last)


def test_a_window_without_an_end_is_open() -> None:
    assert window_of("-10m", None, now=NOW) == Window(AtTime(NOW - 600))


def _key(bound: Bound, position: int, stored_at: float) -> float:
    return position if isinstance(bound, AtPosition) else stored_at


def _key_of(bound: Bound) -> float:
    return bound.position if isinstance(bound, AtPosition) else bound.epoch


@given(bounds, st.one_of(st.none(), bounds), positions, epochs)
def test_inside_means_at_or_after_the_start_and_before_the_end(
    start: Bound, end: Bound | None, position: int, stored_at: float
) -> None:
    window = Window(start, end)
    at_or_after = _key(start, position, stored_at) >= _key_of(start)
    before_end = end is None or _key(end, position, stored_at) < _key_of(end)
    assert window.contains(position, stored_at) == (at_or_after and before_end)
    assert (window.place(position, stored_at) is Place.AFTER) == (not before_end)


@given(
    st.lists(st.tuples(st.integers(0, 50), st.integers(0, 50)), max_size=40),
    bounds.map(lambda b: b if _key_of(b) <= 2000 else AtPosition(0)),
    st.one_of(st.none(), st.integers(0, 2000).map(AtPosition), st.integers(0, 2000).map(AtTime)),
)
def test_reading_a_log_in_order_and_stopping_after_the_end_finds_exactly_the_window(
    steps: list[tuple[int, int]], start: Bound, end: Bound | None
) -> None:
    """Positions and broker times both grow along a log: stopping at the first message
    past the end loses nothing the window holds."""
    log: list[tuple[int, float]] = []
    position, stored_at = 0, 0.0
    for dp, dt in steps:
        position, stored_at = position + dp + 1, stored_at + dt
        log.append((position, stored_at))
    window = Window(start, end)
    read: list[tuple[int, float]] = []
    for position, stored_at in log:
        place = window.place(position, stored_at)
        if place is Place.AFTER:
            break
        if place is Place.INSIDE:
            read.append((position, stored_at))
    assert read == [m for m in log if window.contains(*m)]


def test_an_end_equal_to_the_start_holds_nothing() -> None:
    window = window_of("7", "7", now=NOW)
    assert not any(window.contains(p, NOW) for p in range(20))
    moment = datetime.fromtimestamp(NOW, UTC)
    same = window_of(moment.isoformat(), moment.isoformat(), now=NOW)
    assert not same.contains(0, NOW)
    assert same.contains(0, NOW - 1) is False
    later = (moment + timedelta(seconds=1)).isoformat()
    assert window_of(moment.isoformat(), later, now=NOW).contains(0, NOW)
