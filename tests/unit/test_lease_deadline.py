"""The lease rule every store's lease keeps (``core.lease.LeaseDeadline``): the deadline is
the send time of the last confirmed renewal plus the TTL, and moves only forward."""

from __future__ import annotations

import hypothesis.strategies as st
from hypothesis import given

from core.lease import LeaseDeadline


def test_a_renewal_counts_from_its_send_time_and_a_margin_comes_off() -> None:
    lease = LeaseDeadline(ttl=10.0, at=0.0).renewed(sent=100.0)
    assert not lease.passed(now=109.9)
    assert lease.passed(now=110.0)
    assert lease.passed(now=108.0, margin=2.0)
    assert lease.renewed(sent=95.0).at == 110.0  # a late answer to an older request


def test_a_holder_paused_after_its_last_confirmed_renewal_is_past_it_by_the_ttl() -> None:
    """Heartbeat confirmed at 100 s; whatever is in flight afterwards (a Kafka JoinGroup
    that hangs while the process is paused) renews nothing, so the lease is lost at
    110 s, when the store may already have given it away."""
    lease = LeaseDeadline.granted(ttl=10.0, sent=90.0).renewed(sent=100.0)
    assert lease.passed(now=110.0)


@given(
    sends=st.lists(st.floats(0, 1_000, allow_nan=False), min_size=1, max_size=20),
    ttl=st.floats(0.1, 60, allow_nan=False),
    now=st.floats(0, 2_000, allow_nan=False),
)
def test_never_held_past_the_latest_confirmed_send_plus_ttl(
    sends: list[float], ttl: float, now: float
) -> None:
    lease = LeaseDeadline.granted(ttl, sends[0])
    for sent in sends[1:]:
        lease = lease.renewed(sent)
    assert lease.passed(now) == (now >= max(sends) + ttl)
