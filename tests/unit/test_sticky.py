"""Sticky: exact expectations, and coverage, balance and minimal moves as properties."""

from __future__ import annotations

import math
import random
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.assignment._minimum import minimum_moves
from core.assignment._sticky import StickyStrategy
from core.assignment._types import AssignmentRequest, AssignmentResult
from core.errors import (
    DuplicateMemberError,
    InvalidPartitionCountError,
    NegativeWeightError,
    NoMembersError,
)
from core.model import Assignment, Member

STICKY = StickyStrategy()
FOUR = ["c1", "c2", "c3", "c4"]
POOL = [f"m{i:02d}" for i in range(60)]


def _counts(assignment: Assignment, members: list[Member]) -> dict[str, int]:
    by_member = assignment.by_member()
    return {m.id: len(by_member.get(m.id, ())) for m in members}


def _range_like(partitions: int, ids: list[str], generation: int = 1) -> Assignment:
    base, extra = divmod(partitions, len(ids))
    owners: list[tuple[str, ...]] = []
    for index, member_id in enumerate(ids):
        owners.extend([(member_id,)] * (base + (index < extra)))
    return Assignment(generation=generation, owners=tuple(owners))


@st.composite
def member_lists(draw: st.DrawFn, weighted: bool = False, max_size: int = 40) -> list[Member]:
    ids = draw(st.lists(st.sampled_from(POOL), min_size=1, max_size=max_size, unique=True))
    if not weighted:
        return [Member(i) for i in ids]
    weights = st.sampled_from([0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 0.1, 7.3])
    return [Member(i, draw(weights)) for i in ids]


@st.composite
def previous_assignments(draw: st.DrawFn, partitions: int) -> Assignment:
    """Anything goes: owners from a wider pool (some gone), empty, shared, unsorted-free."""
    owner_sets = st.lists(st.sampled_from(POOL), max_size=3, unique=True)
    owners = tuple(tuple(sorted(draw(owner_sets))) for _ in range(partitions))
    generation = draw(st.integers(min_value=0, max_value=1000))
    return Assignment(generation=generation, owners=owners)


@st.composite
def requests(draw: st.DrawFn, weighted: bool | None = None) -> AssignmentRequest:
    partitions = draw(st.integers(min_value=1, max_value=300))
    use_weights = draw(st.booleans()) if weighted is None else weighted
    members = draw(member_lists(weighted=use_weights))
    previous = draw(previous_assignments(partitions))
    return AssignmentRequest.of(partitions, members, previous)


def _assert_diff_consistent(request: AssignmentRequest, result: AssignmentResult) -> None:
    before = request.previous
    after = result.assignment
    assert after.generation == before.generation + 1
    assert result.moved == sum(
        1 for o, n in zip(before.owners, after.owners, strict=True) if o != n
    )
    everyone = before.members() | after.members()
    assert list(result.revoked) == sorted(everyone)
    assert list(result.granted) == sorted(everyone)
    for member_id in everyone:
        old, new = set(before.owned_by(member_id)), set(after.owned_by(member_id))
        assert result.revoked[member_id] == tuple(sorted(old - new))
        assert result.granted[member_id] == tuple(sorted(new - old))


def _assert_exclusive_cover(request: AssignmentRequest, result: AssignmentResult) -> None:
    ids = {m.id for m in request.members}
    assert result.assignment.partitions == request.partitions
    for owners in result.assignment.owners:
        assert len(owners) == 1
        assert owners[0] in ids


def _assert_balanced(request: AssignmentRequest, result: AssignmentResult) -> None:
    counts = _counts(result.assignment, list(request.members))
    total = sum(Fraction(m.weight) for m in request.members)
    for member in request.members:
        share = request.partitions * Fraction(member.weight) / total
        assert math.floor(share) <= counts[member.id] <= math.ceil(share)


# --- exact expectations -----------------------------------------------------------


def test_moves_exactly_6_and_ends_8_8_8_when_c2_leaves_24_range_partitions() -> None:
    previous = _range_like(24, FOUR)
    request = AssignmentRequest.of(24, ["c1", "c3", "c4"], previous)

    result = STICKY.assign(request)

    assert result.moved == 6
    assert _counts(result.assignment, list(request.members)) == {"c1": 8, "c3": 8, "c4": 8}
    assert result.revoked["c2"] == tuple(range(6, 12))
    for member_id, block in (("c1", range(6)), ("c3", range(12, 18)), ("c4", range(18, 24))):
        assert set(block) <= set(result.assignment.owned_by(member_id))
        assert result.revoked[member_id] == ()


def test_moves_exactly_32_when_128_partitions_go_from_3_to_4_consumers() -> None:
    three = STICKY.assign(AssignmentRequest.of(128, ["c1", "c2", "c3"]))
    assert sorted(_counts(three.assignment, [Member(m) for m in ["c1", "c2", "c3"]]).values()) == [
        42,
        43,
        43,
    ]

    four = STICKY.assign(AssignmentRequest.of(128, FOUR, three.assignment))

    assert four.moved == 32
    assert _counts(four.assignment, [Member(m) for m in FOUR]) == dict.fromkeys(FOUR, 32)
    assert four.granted["c4"] == four.assignment.owned_by("c4")
    assert four.assignment.generation == 2


def test_moves_nothing_when_previous_is_already_balanced() -> None:
    previous = _range_like(24, FOUR, generation=5)
    result = STICKY.assign(AssignmentRequest.of(24, FOUR, previous))
    assert result.moved == 0
    assert result.assignment.owners == previous.owners
    assert result.assignment.generation == 6


def test_gives_members_one_or_none_when_fewer_partitions_than_members() -> None:
    result = STICKY.assign(AssignmentRequest.of(3, ["a", "b", "c", "d", "e"]))
    counts = _counts(result.assignment, [Member(m) for m in "abcde"])
    assert sorted(counts.values()) == [0, 0, 1, 1, 1]


def test_splits_by_weight_when_members_are_weighted() -> None:
    result = STICKY.assign(AssignmentRequest.of(9, [Member("a", 2.0), Member("b", 1.0)]))
    assert _counts(result.assignment, [Member("a"), Member("b")]) == {"a": 6, "b": 3}


def test_gives_ceiling_to_member_holding_more_when_shares_are_fractional() -> None:
    # 7 partitions over 2 members: quotas 4 and 3. b held 5, a held 2: b must get the 4.
    previous = Assignment(generation=1, owners=(("a",),) * 2 + (("b",),) * 5)
    result = STICKY.assign(AssignmentRequest.of(7, ["a", "b"], previous))
    assert result.moved == 1
    assert _counts(result.assignment, [Member("a"), Member("b")]) == {"a": 3, "b": 4}


def test_keeps_shared_partition_with_smallest_surviving_owner_when_previous_fanned_out() -> None:
    previous = Assignment(generation=3, owners=(("a", "b", "gone"), ("b", "c"), ("c",)))
    result = STICKY.assign(AssignmentRequest.of(3, ["c", "b", "a"], previous))
    assert result.assignment.owners == (("a",), ("b",), ("c",))
    assert result.revoked == {"a": (), "b": (0,), "c": (1,), "gone": (0,)}
    assert result.moved == 2


def test_drops_departed_owners_when_previous_names_them() -> None:
    previous = Assignment(generation=1, owners=(("x",), ("y",), ("a",), ("x",)))
    result = STICKY.assign(AssignmentRequest.of(4, ["a", "b"], previous))
    assert result.assignment.members() == frozenset({"a", "b"})
    assert result.assignment.owners[2] == ("a",)
    assert result.revoked["x"] == (0, 3)
    assert result.revoked["y"] == (1,)


# --- invalid requests -------------------------------------------------------------


@pytest.mark.parametrize(
    ("members", "error"),
    [
        ([], NoMembersError),
        (["a", "a"], DuplicateMemberError),
        ([Member("a", -1.0)], NegativeWeightError),
        ([Member("a", math.nan)], NegativeWeightError),
        ([Member("a", math.inf)], NegativeWeightError),
        ([Member("a", 0.0)], NegativeWeightError),
    ],
)
def test_raises_typed_error_when_members_are_invalid(
    members: list[Member] | list[str], error: type[Exception]
) -> None:
    with pytest.raises(error):
        STICKY.assign(AssignmentRequest.of(4, members))


def test_raises_partition_count_error_when_previous_has_other_size() -> None:
    with pytest.raises(InvalidPartitionCountError):
        STICKY.assign(AssignmentRequest.of(4, ["a"], Assignment.empty(5)))


def test_raises_partition_count_error_when_partitions_not_positive() -> None:
    with pytest.raises(InvalidPartitionCountError):
        STICKY.assign(AssignmentRequest.of(0, ["a"]))


# --- properties -------------------------------------------------------------------


@given(requests())
def test_every_partition_has_one_member_owner_when_previous_is_arbitrary(
    request: AssignmentRequest,
) -> None:
    _assert_exclusive_cover(request, STICKY.assign(request))


@given(requests(weighted=False))
def test_loads_differ_by_at_most_one_when_weights_are_equal(request: AssignmentRequest) -> None:
    counts = _counts(STICKY.assign(request).assignment, list(request.members)).values()
    assert max(counts) - min(counts) <= 1


@given(requests())
def test_each_load_is_within_one_of_its_share_when_weights_vary(
    request: AssignmentRequest,
) -> None:
    _assert_balanced(request, STICKY.assign(request))


@given(requests(), st.randoms(use_true_random=False))
def test_result_is_identical_when_repeated_or_members_shuffled(
    request: AssignmentRequest, rng: random.Random
) -> None:
    first = STICKY.assign(request)
    assert STICKY.assign(request) == first
    shuffled = list(request.members)
    rng.shuffle(shuffled)
    again = STICKY.assign(AssignmentRequest.of(request.partitions, shuffled, request.previous))
    assert again == first


@given(requests())
def test_moved_equals_minimum_when_previous_is_arbitrary(request: AssignmentRequest) -> None:
    assert STICKY.assign(request).moved == minimum_moves(request)


@given(requests())
def test_generation_and_revoked_granted_match_the_diff_when_previous_is_arbitrary(
    request: AssignmentRequest,
) -> None:
    _assert_diff_consistent(request, STICKY.assign(request))


@st.composite
def balanced_starts(draw: st.DrawFn) -> tuple[int, list[Member], Assignment]:
    """A membership and the sticky assignment it settled into from scratch."""
    partitions = draw(st.integers(min_value=1, max_value=300))
    members = draw(member_lists(weighted=draw(st.booleans()), max_size=39))
    start = STICKY.assign(AssignmentRequest.of(partitions, members)).assignment
    return partitions, members, start


def _check_change(partitions: int, members: list[Member], previous: Assignment) -> None:
    request = AssignmentRequest.of(partitions, members, previous)
    result = STICKY.assign(request)
    _assert_exclusive_cover(request, result)
    _assert_balanced(request, result)
    _assert_diff_consistent(request, result)
    assert result.moved == minimum_moves(request)


@given(balanced_starts(), st.sampled_from(POOL), st.sampled_from([1.0, 1.0, 0.5, 2.5]))
def test_moved_equals_minimum_when_one_member_joins(
    start: tuple[int, list[Member], Assignment], newcomer: str, weight: float
) -> None:
    partitions, members, previous = start
    if any(m.id == newcomer for m in members):
        newcomer = newcomer + "-new"
    joined = [*members, Member(newcomer, weight)]
    _check_change(partitions, joined, previous)


@given(balanced_starts(), st.data())
def test_moved_equals_minimum_when_one_member_leaves_gracefully(
    start: tuple[int, list[Member], Assignment], data: st.DataObject
) -> None:
    partitions, members, previous = start
    if len(members) < 2:
        return
    leaver = data.draw(st.sampled_from(members))
    # A graceful leave releases its partitions before the rebalance sees it.
    released = tuple(() if o == (leaver.id,) else o for o in previous.owners)
    previous = Assignment(generation=previous.generation, owners=released)
    _check_change(partitions, [m for m in members if m != leaver], previous)


@given(balanced_starts(), st.data())
def test_moved_equals_minimum_when_one_member_crashes(
    start: tuple[int, list[Member], Assignment], data: st.DataObject
) -> None:
    partitions, members, previous = start
    if len(members) < 2:
        return
    # A crashed member still owns its partitions in the previous assignment.
    crashed = data.draw(st.sampled_from(members))
    _check_change(partitions, [m for m in members if m != crashed], previous)


@given(balanced_starts(), st.data())
def test_moved_equals_minimum_when_several_members_join_and_leave(
    start: tuple[int, list[Member], Assignment], data: st.DataObject
) -> None:
    partitions, members, previous = start
    survivors = data.draw(st.lists(st.sampled_from(members), unique=True))
    newcomers = data.draw(
        st.lists(st.sampled_from([f"n{i}" for i in range(10)]), min_size=1, unique=True)
    )
    _check_change(partitions, [*survivors, *(Member(n) for n in newcomers)], previous)
