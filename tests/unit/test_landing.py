"""``core.landing``: when a buffer rolls into a file, and the backoff after a failed write;
``core.ingest.unprocessable``: which messages go to the dead letters at once."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from adapters._parquet_format import ParquetSettings, encode_files
from core.ingest import unprocessable
from core.landing import (
    InvalidRollPolicyError,
    RollPolicy,
    RollReason,
    roll_reason,
)
from core.messages import PROJECT_ID_PATTERN, Envelope, LandedRow
from core.retry import deliveries_exhausted, retry_delay

policies = st.builds(
    RollPolicy,
    max_rows=st.integers(1, 100_000),
    max_bytes=st.integers(1, 2**40),
    max_age=st.floats(0.001, 3600, allow_nan=False),
    handover_age=st.floats(0.001, 3600, allow_nan=False),
    idle_age=st.floats(0.001, 3600, allow_nan=False),
    idle_gaps=st.floats(1, 100, allow_nan=False),
)
times = st.floats(0, 1e9, allow_nan=False)


def test_defaults_roll_by_the_first_bound_reached() -> None:
    policy = RollPolicy(max_rows=10, max_bytes=1000, max_age=5.0)
    assert roll_reason(policy, rows=9, size=999, oldest=0.0, now=4.9) is None
    assert roll_reason(policy, rows=10, size=0, oldest=0.0, now=0.0) is RollReason.ROWS
    assert roll_reason(policy, rows=1, size=1000, oldest=0.0, now=0.0) is RollReason.BYTES
    assert roll_reason(policy, rows=1, size=1, oldest=0.0, now=5.0) is RollReason.AGE
    assert roll_reason(policy, rows=0, size=0, oldest=None, now=99.0) is None


@given(policies, st.integers(0, 200_000), st.integers(0, 2**41), times, st.floats(0, 1e4))
def test_a_buffer_rolls_exactly_when_a_bound_is_reached(
    policy: RollPolicy, rows: int, size: int, oldest: float, waited: float
) -> None:
    assume(rows > 0)
    now = oldest + waited
    reason = roll_reason(policy, rows=rows, size=size, oldest=oldest, now=now)
    over = rows >= policy.max_rows or size >= policy.max_bytes or now >= policy.due_at(oldest)
    assert (reason is not None) == over
    if reason is RollReason.ROWS:
        assert rows >= policy.max_rows
    if reason is RollReason.BYTES:
        assert rows < policy.max_rows and size >= policy.max_bytes
    if reason is RollReason.AGE:
        assert rows < policy.max_rows and size < policy.max_bytes


@given(policies, st.integers(1, 200_000), st.integers(0, 2**41), times, st.floats(0, 1e4))
def test_a_handover_buffer_rolls_by_the_shorter_age_and_otherwise_as_before(
    policy: RollPolicy, rows: int, size: int, oldest: float, waited: float
) -> None:
    now = oldest + waited
    plain = roll_reason(policy, rows=rows, size=size, oldest=oldest, now=now)
    early = roll_reason(policy, rows=rows, size=size, oldest=oldest, now=now, handover=True)
    if plain is not None:
        assert early is plain  # a handover only ever rolls sooner
    else:
        due = policy.due_at(oldest, handover=True)
        assert due <= policy.due_at(oldest)
        assert (early is RollReason.HANDOVER) == (now >= due)


def test_a_handover_rolls_after_handover_age_not_max_age() -> None:
    policy = RollPolicy(max_rows=10, max_bytes=1000, max_age=5.0, handover_age=0.5)
    assert roll_reason(policy, rows=1, size=1, oldest=0.0, now=0.4, handover=True) is None
    assert (
        roll_reason(policy, rows=1, size=1, oldest=0.0, now=0.5, handover=True)
        is RollReason.HANDOVER
    )
    assert roll_reason(policy, rows=1, size=1, oldest=0.0, now=0.5) is None


@given(
    policies,
    st.integers(1, 200_000),
    times,
    st.floats(0, 1e4),
    st.floats(0, 1e4),
    st.floats(0, 100),
)
def test_a_buffer_rolls_when_quiet_for_its_usual_gaps_and_idle_age(
    policy: RollPolicy,
    rows: int,
    oldest: float,
    filled_for: float,
    quiet_for: float,
    usual_gap: float,
) -> None:
    newest = oldest + filled_for
    now = newest + quiet_for
    reason = roll_reason(
        policy, rows=rows, size=0, oldest=oldest, now=now, newest=newest, usual_gap=usual_gap
    )
    plain = roll_reason(policy, rows=rows, size=0, oldest=oldest, now=now)
    if plain is not None:
        assert reason is plain
    else:
        quiet = max(policy.idle_age, policy.idle_gaps * usual_gap)
        assert (reason is RollReason.IDLE) == (now >= newest + quiet)
        due = policy.due_at(oldest, newest=newest, usual_gap=usual_gap)
        assert (reason is None) == (now < due)


def test_a_bursty_slow_stream_is_not_quiet_between_its_bursts() -> None:
    policy = RollPolicy(max_age=20.0, idle_age=1.0, idle_gaps=20.0)
    # a fetch every ~1 s (one request of 100 messages): a 1.5 s gap is not the end
    assert (
        roll_reason(policy, rows=500, size=1, oldest=0.0, now=6.5, newest=5.0, usual_gap=1.0)
        is None
    )
    # after a fast burst (additions milliseconds apart) 1 s of nothing is
    assert (
        roll_reason(policy, rows=500, size=1, oldest=0.0, now=6.0, newest=5.0, usual_gap=0.005)
        is RollReason.IDLE
    )


@given(policies, times, st.floats(0, 1e4))
def test_an_empty_buffer_never_rolls(policy: RollPolicy, oldest: float, waited: float) -> None:
    assert roll_reason(policy, rows=0, size=0, oldest=None, now=oldest + waited) is None


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_rows": 0}, "max_rows must be at least 1"),
        ({"max_bytes": 0}, "max_bytes must be at least 1"),
        ({"max_age": 0.0}, "max_age must be above 0"),
        ({"max_age": float("nan")}, "max_age must be above 0"),
        ({"handover_age": 0.0}, "handover_age must be above 0"),
        ({"idle_age": -1.0}, "idle_age must be above 0"),
        ({"idle_gaps": 0.5}, "idle_gaps must be at least 1"),
    ],
)
def test_a_policy_that_cannot_work_is_refused(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(InvalidRollPolicyError, match=message):
        RollPolicy(**kwargs)  # type: ignore[arg-type]


def test_retry_delay_doubles_from_base_to_cap() -> None:
    assert [retry_delay(n, base=0.5, cap=5.0) for n in range(0, 7)] == [
        0.0,
        0.5,
        1.0,
        2.0,
        4.0,
        5.0,
        5.0,
    ]


@given(st.integers(1, 10_000), st.floats(0.001, 10), st.floats(0, 1000))
def test_retry_delay_grows_and_stays_within_its_bounds(
    failures: int, base: float, extra: float
) -> None:
    cap = base + extra
    delay = retry_delay(failures, base=base, cap=cap)
    assert base <= delay <= cap
    assert retry_delay(failures + 1, base=base, cap=cap) >= delay


@given(st.integers(1, 100))
def test_exactly_the_first_max_deliver_deliveries_are_processed(max_deliver: int) -> None:
    processed = [
        a for a in range(1, 3 * max_deliver + 2) if not deliveries_exhausted(a, max_deliver)
    ]
    assert processed == list(range(1, max_deliver + 1)), "then every later one is given up"


def test_deliveries_exhausted_refuses_a_budget_below_one() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        deliveries_exhausted(1, 0)


def test_retry_delay_refuses_a_cap_below_base() -> None:
    with pytest.raises(ValueError, match="0 < base <= cap"):
        retry_delay(1, base=2.0, cap=1.0)


def _envelope(project_id: str, partition: int, received_at: float = 0.0) -> Envelope:
    return Envelope(
        message_id="m1",
        project_id=project_id,
        partition=partition,
        gateway_id="gw",
        sequence=1,
        received_at=received_at,
        payload=b"{}",
    )


@given(st.from_regex(PROJECT_ID_PATTERN, fullmatch=True), st.integers(0, 10_000))
def test_a_well_formed_message_on_its_own_partition_is_processable(
    project_id: str, partition: int
) -> None:
    assert unprocessable(_envelope(project_id, partition), partition) is None


@given(st.text(max_size=80), st.integers(0, 10_000), st.integers(0, 10_000))
def test_a_message_is_unprocessable_for_a_bad_project_or_a_foreign_partition(
    project_id: str, named: int, stored_on: int
) -> None:
    problem = unprocessable(_envelope(project_id, named), stored_on)
    bad_project = PROJECT_ID_PATTERN.fullmatch(project_id) is None
    assert (problem is not None) == (bad_project or named != stored_on)
    if bad_project:
        assert problem is not None and "not one safe token" in problem
    elif named != stored_on:
        assert problem == f"it names partition {named} but was stored on partition {stored_on}"


@given(st.floats(allow_nan=True, allow_infinity=True))
def test_a_message_is_processable_exactly_when_the_landing_table_can_date_it(
    received_at: float,
) -> None:
    # A poison message from another producer: one bad timestamp would fail every batch.
    problem = unprocessable(_envelope("projA", 3, received_at), 3)
    row = LandedRow(_envelope("projA", 3, received_at), 1, "h1", 0.0)
    try:
        encode_files([row], ParquetSettings())
    except (ValueError, OverflowError, OSError):
        assert problem is not None and "received_at" in problem
    else:
        assert problem is None


@given(st.binary(max_size=64))
def test_a_message_is_processable_only_when_its_payload_is_utf8_text(payload: bytes) -> None:
    # The table's payload column is text, so Spark's from_json and DuckDB's json_extract
    # read it directly; bytes that are not UTF-8 would fail every batch they are in.
    envelope = replace(_envelope("projA", 3, 1_800_000_000.0), payload=payload)
    problem = unprocessable(envelope, 3)
    try:
        payload.decode("utf-8")
    except UnicodeDecodeError:
        assert problem is not None and "not UTF-8" in problem
    else:
        assert problem is None
        encode_files([LandedRow(envelope, 1, "h1", 0.0)], ParquetSettings())
