"""Fan-out: the reference's 10-share examples, the owner bound, seeds, and stickiness."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.assignment._fan_out import FanOutStrategy
from core.assignment._sticky import StickyStrategy
from core.assignment._types import AssignmentOptions, AssignmentRequest, AssignmentResult
from core.errors import (
    DuplicateMemberError,
    ImpossibleFanOutError,
    NegativeWeightError,
    NoMembersError,
)
from core.model import Assignment, Member

FAN_OUT = FanOutStrategy()


def _consumers(count: int, prefix: str = "c") -> list[str]:
    return [f"{prefix}{i:03d}" for i in range(count)]


def _assign(
    shares: int,
    members: list[str] | list[Member],
    previous: Assignment | None = None,
    seed: int = 0,
    bound: int | None = None,
) -> AssignmentResult:
    options = AssignmentOptions(seed=seed, max_owners_per_partition=bound)
    return FAN_OUT.assign(AssignmentRequest.of(shares, members, previous, options))


def _owner_counts(assignment: Assignment) -> list[int]:
    return [len(owners) for owners in assignment.owners]


def _shares_per_consumer(assignment: Assignment, ids: list[str]) -> dict[str, int]:
    held = assignment.by_member()
    return {m: len(held.get(m, ())) for m in ids}


def _check_fan_out_shape(shares: int, ids: list[str], result: AssignmentResult) -> None:
    consumers = len(ids)
    owners = result.assignment.owners
    assert all(o == tuple(sorted(o)) and len(set(o)) == len(o) for o in owners)
    assert result.assignment.members() <= frozenset(ids)
    held = _shares_per_consumer(result.assignment, ids)
    if consumers <= shares:
        assert _owner_counts(result.assignment) == [1] * shares
        assert set(held.values()) <= {shares // consumers, -(-shares // consumers)}
    else:
        base, extra = divmod(consumers, shares)
        assert set(held.values()) == {1}
        counts = Counter(_owner_counts(result.assignment))
        assert counts == +Counter({base: shares - extra, base + 1: extra})


# --- the reference's examples -------------------------------------------------------


def test_gives_each_consumer_two_shares_when_10_shares_and_5_consumers() -> None:
    ids = _consumers(5)
    result = _assign(10, ids)
    assert _owner_counts(result.assignment) == [1] * 10
    assert _shares_per_consumer(result.assignment, ids) == dict.fromkeys(ids, 2)


def test_gives_every_share_two_owners_when_10_shares_and_20_consumers() -> None:
    ids = _consumers(20)
    result = _assign(10, ids)
    assert _owner_counts(result.assignment) == [2] * 10
    assert _shares_per_consumer(result.assignment, ids) == dict.fromkeys(ids, 1)


def test_puts_3_extras_on_distinct_shares_when_10_shares_and_23_consumers() -> None:
    ids = _consumers(23)
    result = _assign(10, ids, seed=7)
    assert _shares_per_consumer(result.assignment, ids) == dict.fromkeys(ids, 1)
    assert Counter(_owner_counts(result.assignment)) == {2: 7, 3: 3}


def test_gives_the_same_result_when_seed_and_request_repeat() -> None:
    ids = _consumers(23)
    first = _assign(10, ids, seed=42)
    assert _assign(10, ids, seed=42) == first
    assert _assign(10, list(reversed(ids)), seed=42) == first


def test_places_extras_differently_when_seeds_differ() -> None:
    ids = _consumers(23)
    placements = {
        tuple(p for p, o in enumerate(_assign(10, ids, seed=s).assignment.owners) if len(o) == 3)
        for s in range(20)
    }
    assert len(placements) > 1


def test_behaves_like_unweighted_sticky_when_consumers_do_not_outnumber_shares() -> None:
    members = [Member("a", 5.0), Member("b", 1.0), Member("c", 1.0)]
    previous = Assignment(2, (("a",), ("b",), ("a", "b"), (), ("c",), ("gone",), ("a",)))
    result = _assign(7, members, previous)
    expected = StickyStrategy().assign(AssignmentRequest.of(7, ["a", "b", "c"], previous))
    assert result == expected
    assert sorted(_shares_per_consumer(result.assignment, ["a", "b", "c"]).values()) == [2, 2, 3]


# --- the owner bound and invalid input ---------------------------------------------


def test_raises_impossible_fan_out_when_ceil_exceeds_the_bound() -> None:
    with pytest.raises(ImpossibleFanOutError, match="23 consumers over 10 partitions"):
        _assign(10, _consumers(23), bound=2)


def test_accepts_when_ceil_equals_the_bound() -> None:
    result = _assign(10, _consumers(23), bound=3)
    assert max(_owner_counts(result.assignment)) == 3
    assert max(_owner_counts(_assign(10, _consumers(20), bound=2).assignment)) == 2


def test_raises_impossible_fan_out_when_bound_is_zero() -> None:
    with pytest.raises(ImpossibleFanOutError):
        _assign(10, _consumers(3), bound=0)


@pytest.mark.parametrize(
    ("members", "error"),
    [
        ([], NoMembersError),
        (["a", "b", "a"], DuplicateMemberError),
        ([Member("a", -2.0)], NegativeWeightError),
        ([Member("a", float("nan"))], NegativeWeightError),
    ],
)
def test_raises_typed_error_when_members_are_invalid(
    members: list[Member] | list[str], error: type[Exception]
) -> None:
    with pytest.raises(error):
        _assign(2, members)


# --- stickiness -------------------------------------------------------------------


def test_moves_only_the_newcomer_when_23_consumers_become_24() -> None:
    ids = _consumers(23)
    before = _assign(10, ids, seed=3)
    after = _assign(10, [*ids, "z-new"], before.assignment, seed=3)
    assert after.moved == 1
    assert all(not parts for parts in after.revoked.values())
    assert len(after.granted["z-new"]) == 1
    assert Counter(_owner_counts(after.assignment)) == {2: 6, 3: 4}


def test_moves_at_most_one_consumer_when_one_of_23_leaves() -> None:
    ids = _consumers(23)
    before = _assign(10, ids, seed=3)
    for leaver in ids:
        survivors = [m for m in ids if m != leaver]
        after = _assign(10, survivors, before.assignment, seed=3)
        assert sum(1 for m in survivors if after.revoked[m]) <= 1


@st.composite
def settled(draw: st.DrawFn) -> tuple[int, list[str], int, Assignment]:
    """A fan-out result with A >= n consumers, reached from an arbitrary previous."""
    shares = draw(st.integers(min_value=1, max_value=30))
    consumers = draw(st.integers(min_value=shares, max_value=3 * shares + 5))
    ids = _consumers(consumers)
    seed = draw(st.integers(min_value=0, max_value=2**32))
    pool = [*ids, "gone1", "gone2"]
    owners = tuple(
        tuple(sorted(draw(st.lists(st.sampled_from(pool), max_size=4, unique=True))))
        for _ in range(shares)
    )
    start = _assign(shares, ids, Assignment(1, owners), seed=seed).assignment
    return shares, ids, seed, start


@given(settled())
def test_revokes_nothing_and_moves_one_share_when_a_consumer_joins(
    state: tuple[int, list[str], int, Assignment],
) -> None:
    shares, ids, seed, previous = state
    result = _assign(shares, [*ids, "z-new"], previous, seed=seed)
    assert result.moved == 1
    assert all(not parts for parts in result.revoked.values())
    assert len(result.granted["z-new"]) == 1
    _check_fan_out_shape(shares, [*ids, "z-new"], result)


@given(settled(), st.data())
def test_moves_at_most_one_survivor_when_a_consumer_leaves(
    state: tuple[int, list[str], int, Assignment], data: st.DataObject
) -> None:
    shares, ids, seed, previous = state
    if len(ids) == 1:
        return
    leaver = data.draw(st.sampled_from(ids))
    survivors = [m for m in ids if m != leaver]
    result = _assign(shares, survivors, previous, seed=seed)
    assert sum(1 for m in survivors if result.revoked[m]) <= 1
    _check_fan_out_shape(shares, survivors, result)


# --- shape and determinism over arbitrary requests ----------------------------------


@st.composite
def requests(draw: st.DrawFn) -> tuple[int, list[str], Assignment, int]:
    shares = draw(st.integers(min_value=1, max_value=40))
    ids = draw(st.lists(st.sampled_from(_consumers(120)), min_size=1, max_size=100, unique=True))
    pool = [*ids[:10], "gone"]
    owners = tuple(
        tuple(sorted(draw(st.lists(st.sampled_from(pool), max_size=3, unique=True))))
        for _ in range(shares)
    )
    return shares, ids, Assignment(5, owners), draw(st.integers(min_value=0, max_value=100))


@given(requests(), st.randoms(use_true_random=False))
def test_has_balanced_shape_and_is_deterministic_when_previous_is_arbitrary(
    request: tuple[int, list[str], Assignment, int], rng: random.Random
) -> None:
    shares, ids, previous, seed = request
    result = _assign(shares, ids, previous, seed=seed)
    _check_fan_out_shape(shares, ids, result)
    assert result.assignment.generation == 6
    shuffled = list(ids)
    rng.shuffle(shuffled)
    assert _assign(shares, shuffled, previous, seed=seed) == result
