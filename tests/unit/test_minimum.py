"""minimum_moves against brute force, and the quota helpers it rests on."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.assignment._minimum import minimum_moves
from core.assignment._quota import balanced_quotas, proportional_shares, sticky_quotas
from core.assignment._types import AssignmentRequest, diff
from core.errors import DuplicateMemberError, NegativeWeightError, NoMembersError
from core.model import Assignment, Member

SMALL_POOL = ["a", "b", "c", "d"]


def _brute_force_minimum(request: AssignmentRequest) -> int:
    """Try every exclusive assignment, keep the balanced ones, return the fewest moves."""
    ids = [m.id for m in request.members]
    total = sum(Fraction(m.weight) for m in request.members)
    bounds = {
        m.id: (
            math.floor(request.partitions * Fraction(m.weight) / total),
            math.ceil(request.partitions * Fraction(m.weight) / total),
        )
        for m in request.members
    }
    best = request.partitions
    for choice in itertools.product(ids, repeat=request.partitions):
        if all(bounds[m][0] <= choice.count(m) <= bounds[m][1] for m in ids):
            owners = tuple((m,) for m in choice)
            best = min(best, diff(request.previous, owners).moved)
    return best


@st.composite
def small_requests(draw: st.DrawFn) -> AssignmentRequest:
    partitions = draw(st.integers(min_value=1, max_value=6))
    ids = draw(st.lists(st.sampled_from(SMALL_POOL[:3]), min_size=1, max_size=3, unique=True))
    weights = st.sampled_from([1.0, 1.0, 0.5, 2.0, 3.0, 0.75])
    members = [Member(i, draw(weights)) for i in ids]
    owner_sets = st.lists(st.sampled_from(SMALL_POOL), max_size=2, unique=True)
    owners = tuple(tuple(sorted(draw(owner_sets))) for _ in range(partitions))
    return AssignmentRequest.of(partitions, members, Assignment(generation=1, owners=owners))


@given(small_requests())
def test_matches_brute_force_when_instances_are_small(request: AssignmentRequest) -> None:
    assert minimum_moves(request) == _brute_force_minimum(request)


def test_is_6_when_c2_leaves_24_range_partitions() -> None:
    owners = tuple((f"c{1 + p // 6}",) for p in range(24))
    request = AssignmentRequest.of(24, ["c1", "c3", "c4"], Assignment(1, owners))
    assert minimum_moves(request) == 6


def test_is_32_when_128_balanced_partitions_go_from_3_to_4_members() -> None:
    owners = tuple((f"c{1 + p % 3}",) for p in range(128))
    request = AssignmentRequest.of(128, ["c1", "c2", "c3", "c4"], Assignment(1, owners))
    assert minimum_moves(request) == 32


def test_counts_every_partition_when_there_is_no_previous_owner() -> None:
    assert minimum_moves(AssignmentRequest.of(10, ["a", "b"])) == 10


def test_counts_orphans_and_shared_partitions_when_previous_has_them() -> None:
    # 0: orphan (gone), 1: shared (always changes), 2 and 3: a alone, can stay.
    previous = Assignment(1, (("gone",), ("a", "b"), ("a",), ("a",)))
    assert minimum_moves(AssignmentRequest.of(4, ["a", "b"], previous)) == 2


def test_is_zero_when_previous_is_balanced_over_the_same_members() -> None:
    previous = Assignment(4, (("a",), ("b",), ("a",), ("b",), ("c",)))
    assert minimum_moves(AssignmentRequest.of(5, ["a", "b", "c"], previous)) == 0


@pytest.mark.parametrize(
    ("members", "error"),
    [
        ([], NoMembersError),
        (["a", "a"], DuplicateMemberError),
        ([Member("a", float("nan"))], NegativeWeightError),
    ],
)
def test_raises_typed_error_when_request_is_invalid(
    members: list[Member] | list[str], error: type[Exception]
) -> None:
    with pytest.raises(error):
        minimum_moves(AssignmentRequest.of(3, members))


# --- quotas -----------------------------------------------------------------------


def test_gives_first_ids_one_more_when_weights_are_equal() -> None:
    quotas = balanced_quotas(10, [Member(m) for m in ["d", "b", "a", "c"]])
    assert quotas == {"a": 3, "b": 3, "c": 2, "d": 2}


def test_gives_extra_to_largest_remainder_when_weights_differ() -> None:
    # Shares 10 * (1, 2, 4) / 7 = 1.43, 2.86, 5.71: floors 1+2+5 = 8, two extras go to
    # the largest remainders (b: .86, c: .71).
    quotas = balanced_quotas(10, [Member("a", 1.0), Member("b", 2.0), Member("c", 4.0)])
    assert quotas == {"a": 1, "b": 3, "c": 6}


def test_sees_whole_shares_when_float_arithmetic_would_not() -> None:
    # In floats 9 * 0.1 / (0.1 + 0.1 + 0.1) is 2.9999999999999996; the share is exactly 3.
    members = [Member(m, 0.1) for m in ["a", "b", "c"]]
    shares = proportional_shares(9, members)
    assert shares.floors == {"a": 3, "b": 3, "c": 3}
    assert shares.extra == 0
    assert not any(shares.may_take_extra(m) for m in ["a", "b", "c"])


@given(
    st.integers(min_value=1, max_value=500),
    st.lists(st.sampled_from([0.1, 0.5, 1.0, 2.0, 3.3, 10.0]), min_size=1, max_size=30),
)
def test_quotas_sum_to_partitions_and_stay_within_one_when_weights_vary(
    partitions: int, weights: list[float]
) -> None:
    members = [Member(f"m{i}", w) for i, w in enumerate(weights)]
    total = sum(Fraction(w) for w in weights)
    for quotas in (
        balanced_quotas(partitions, members),
        sticky_quotas(partitions, members, {m.id: i for i, m in enumerate(members)}),
    ):
        assert sum(quotas.values()) == partitions
        for member in members:
            share = partitions * Fraction(member.weight) / total
            assert math.floor(share) <= quotas[member.id] <= math.ceil(share)


def test_gives_ceilings_to_members_that_hold_more_than_the_floor() -> None:
    # 10 over 4: floors 2, two ceilings. c and d held 3 (can fill a ceiling), a and b 2.
    members = [Member(m) for m in ["a", "b", "c", "d"]]
    quotas = sticky_quotas(10, members, {"a": 2, "b": 2, "c": 3, "d": 3})
    assert quotas == {"a": 2, "b": 2, "c": 3, "d": 3}


def test_uses_shared_holdings_as_tie_break_when_sole_holdings_tie() -> None:
    members = [Member(m) for m in ["a", "b", "c"]]
    quotas = sticky_quotas(4, members, {}, also_held={"c": 2})
    assert quotas == {"a": 1, "b": 1, "c": 2}
