"""The handler's and leader's handoff rules (``core.handoff``): examples and properties."""

from __future__ import annotations

import hypothesis.strategies as st
from hypothesis import given

from core.coordination import Hold
from core.handoff import (
    ClaimAction,
    decide_claim,
    needs_rebalance,
    ownership_changes,
    stale_holds,
)
from core.model import Assignment

MEMBERS = st.sampled_from(("a", "b", "c"))


def test_a_free_partition_or_one_held_by_me_starts() -> None:
    assert decide_claim("a", None, {"a"}).action is ClaimAction.START
    mine = Hold(3, "a", 1, 10)
    decision = decide_claim("a", mine, {"a"})
    assert (decision.action, decision.replacing) == (ClaimAction.START, mine)


def test_a_live_holder_is_waited_for_and_a_gone_one_is_replaced_by_its_version() -> None:
    held = Hold(3, "b", 1, 10)
    assert decide_claim("a", held, {"a", "b"}).action is ClaimAction.WAIT
    decision = decide_claim("a", held, {"a"})
    assert (decision.action, decision.replacing) == (ClaimAction.TAKE_OVER, held)
    assert decision.reason == "holder b is gone (lease expired)"


@given(
    me=MEMBERS,
    holder=st.none() | MEMBERS,
    live=st.frozensets(MEMBERS),
)
def test_a_claim_never_replaces_another_live_member(
    me: str, holder: str | None, live: frozenset[str]
) -> None:
    hold = None if holder is None else Hold(0, holder, 1, 7)
    decision = decide_claim(me, hold, live | {me})
    if holder is not None and holder != me and holder in live:
        assert decision.action is ClaimAction.WAIT
    else:
        assert decision.action is not ClaimAction.WAIT
        assert decision.replacing == hold


def test_the_leader_rebalances_when_members_or_owners_are_missing_only() -> None:
    both = Assignment.from_members(3, 2, {"a": [0], "b": [1]})
    assert needs_rebalance(None, {"a"})
    assert not needs_rebalance(None, set())
    assert not needs_rebalance(both, {"a", "b"})
    assert needs_rebalance(both, {"a"})
    assert needs_rebalance(both, {"a", "b", "c"})
    assert needs_rebalance(Assignment.from_members(3, 2, {"a": [0]}), {"a"})
    assert needs_rebalance(Assignment.empty(2), {"a"})


@given(
    partitions=st.integers(1, 12),
    data=st.data(),
    accepting=st.booleans(),
)
def test_every_owned_partition_is_revoked_or_kept_and_grants_are_new(
    partitions: int, data: st.DataObject, accepting: bool
) -> None:
    owners = data.draw(st.lists(st.none() | MEMBERS, min_size=partitions, max_size=partitions))
    assignment = Assignment(7, tuple(() if o is None else (o,) for o in owners))
    owned = data.draw(st.frozensets(st.integers(0, partitions - 1)))
    changes = ownership_changes("a", owned, assignment, accepting=accepting)
    assert set(changes.revoke) | set(changes.keep) == owned
    assert not set(changes.revoke) & set(changes.keep)
    assert set(changes.keep) | set(changes.grant) <= set(assignment.owned_by("a"))
    assert not set(changes.grant) & owned
    if accepting:
        assert set(changes.keep) | set(changes.grant) == set(assignment.owned_by("a"))
    else:
        assert changes.grant == ()
    for part in (changes.revoke, changes.keep, changes.grant):
        assert list(part) == sorted(part)


def test_holds_under_my_id_at_join_are_stale_and_nobody_elses_are() -> None:
    holds = {
        4: Hold(4, "a", 2, 11),
        1: Hold(1, "a", 1, 9),
        2: Hold(2, "b", 1, 10),
    }
    assert stale_holds("a", holds) == (1, 4)
    assert stale_holds("c", holds) == ()
