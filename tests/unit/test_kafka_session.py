"""The Kafka coordination session's lease rule (``adapters.kafka._group.SessionDeadline``):
the deadline moves only on answers the broker gave to a current member."""

from __future__ import annotations

import hypothesis.strategies as st
from hypothesis import given

from adapters.kafka._group import SessionDeadline


def test_no_lease_to_lose_before_the_first_sync() -> None:
    lease = SessionDeadline(ttl=10.0)
    assert not lease.is_lost(now=1_000.0)
    lease.synced = True
    assert lease.is_lost(now=1_000.0)


def test_an_answer_renews_from_the_send_time_and_a_margin_comes_off() -> None:
    lease = SessionDeadline(ttl=10.0)
    lease.answered(sent=100.0)
    lease.synced = True
    assert not lease.is_lost(now=109.9)
    assert lease.is_lost(now=110.0)
    assert lease.is_lost(now=108.0, margin=2.0)
    lease.answered(sent=95.0)  # a late answer to an older request never moves it back
    assert lease.deadline == 110.0


def test_a_member_paused_inside_a_rebalance_loses_its_lease_by_the_last_real_answer() -> None:
    """Heartbeat ok at 100 s; the rebalance starts; REBALANCE_IN_PROGRESS answers and a
    JoinGroup in flight renew nothing, so however long the join hangs (the process is
    paused), the lease is lost at 110 s, when the broker may already have dropped it."""
    lease = SessionDeadline(ttl=10.0)
    lease.answered(sent=100.0)
    lease.synced = True
    assert lease.is_lost(now=110.0)


@given(
    sends=st.lists(st.floats(0, 1_000, allow_nan=False), min_size=1, max_size=20),
    ttl=st.floats(0.1, 60, allow_nan=False),
    now=st.floats(0, 2_000, allow_nan=False),
)
def test_never_held_past_the_latest_answered_send_plus_ttl(
    sends: list[float], ttl: float, now: float
) -> None:
    lease = SessionDeadline(ttl=ttl)
    for sent in sends:
        lease.answered(sent)
    lease.synced = True
    assert lease.is_lost(now) == (now >= max(sends) + ttl)
