"""Weighted: the documented balance bound, stickiness, and exact small cases."""

from __future__ import annotations

import math
import random
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.assignment._sticky import StickyStrategy
from core.assignment._types import AssignmentOptions, AssignmentRequest, AssignmentResult
from core.assignment._weighted import WeightedStrategy
from core.errors import InvalidPartitionCountError, NegativeWeightError, NoMembersError
from core.model import Assignment, Member

WEIGHTED = WeightedStrategy()
POOL = [f"m{i:02d}" for i in range(50)]


def _request(
    weights: dict[int, float],
    members: list[Member] | list[str],
    previous: Assignment | None = None,
    partitions: int | None = None,
) -> AssignmentRequest:
    count = partitions if partitions is not None else len(weights)
    options = AssignmentOptions(partition_weights=weights)
    return AssignmentRequest.of(count, members, previous, options)


def _loads(request: AssignmentRequest, result: AssignmentResult) -> dict[str, float]:
    weights = request.options.partition_weights
    loads = {m.id: 0.0 for m in request.members}
    for partition, owners in enumerate(result.assignment.owners):
        (owner,) = owners
        loads[owner] += weights.get(partition, 1.0)
    return loads


def _assert_within_bound(request: AssignmentRequest, result: AssignmentResult) -> None:
    """The docstring's bound: f_m - w_max < load_m < f_m + w_max (with rounding slack)."""
    weights = [request.options.partition_weights.get(p, 1.0) for p in range(request.partitions)]
    total = math.fsum(weights)
    heaviest = max(weights)
    capacity = math.fsum(m.weight for m in request.members)
    loads = _loads(request, result)
    slack = 1e-9 * max(1.0, total)
    for member in request.members:
        fair = total * member.weight / capacity
        assert fair - heaviest - slack < loads[member.id] < fair + heaviest + slack


@st.composite
def requests(
    draw: st.DrawFn, unit: bool = False, dyadic: bool = False
) -> tuple[AssignmentRequest, random.Random]:
    partitions = draw(st.integers(min_value=1, max_value=300))
    ids = draw(st.lists(st.sampled_from(POOL), min_size=1, max_size=40, unique=True))
    capacities = st.sampled_from([1.0, 1.0, 0.5, 2.0, 3.0, 0.25])
    members = [Member(i, draw(capacities)) for i in ids]
    weights: dict[int, float] = {}
    if not unit:
        if dyadic:
            values = st.integers(min_value=0, max_value=400).map(lambda n: n / 4)
        else:
            values = st.floats(min_value=0.0, max_value=100.0, allow_nan=False)
        weights = draw(st.dictionaries(st.integers(0, partitions - 1), values))
    owner_sets = st.lists(st.sampled_from([*POOL[:45], "gone"]), max_size=2, unique=True)
    owners = tuple(tuple(sorted(draw(owner_sets))) for _ in range(partitions))
    previous = Assignment(generation=draw(st.integers(0, 99)), owners=owners)
    request = _request(weights, members, previous, partitions)
    return request, draw(st.randoms(use_true_random=False))


# --- exact cases ------------------------------------------------------------------


def test_places_heaviest_first_on_least_loaded_when_previous_is_empty() -> None:
    result = WEIGHTED.assign(_request({0: 5.0, 1: 3.0, 2: 2.0}, ["a", "b"]))
    assert result.assignment.owners == (("a",), ("b",), ("b",))


def test_respects_capacity_when_members_have_different_weights() -> None:
    request = _request(dict.fromkeys(range(6), 1.0), [Member("a", 2.0), Member("b", 1.0)])
    loads = _loads(request, WEIGHTED.assign(request))
    assert loads == {"a": 4.0, "b": 2.0}


def test_moves_nothing_when_previous_is_already_within_bounds() -> None:
    previous = Assignment(3, (("b",), ("a",), ("a",)))
    result = WEIGHTED.assign(_request({0: 5.0, 1: 3.0, 2: 2.0}, ["a", "b"], previous))
    assert result.moved == 0
    assert result.assignment.generation == 4


def test_sheds_lightest_excess_when_a_member_joins() -> None:
    # a owned everything (load 12); fair share is now 6 each: a keeps its lightest
    # partitions while below 6 (1, 2, then 3 at load 3), b takes the rest (6).
    weights = {0: 6.0, 1: 3.0, 2: 2.0, 3: 1.0}
    previous = Assignment(1, (("a",),) * 4)
    result = WEIGHTED.assign(_request(weights, ["a", "b"], previous))
    assert result.assignment.owners == (("b",), ("a",), ("a",), ("a",))
    assert result.moved == 1


def test_lifts_a_starved_member_when_previous_leaves_it_empty() -> None:
    # Unit weights, 9 over 4: keeping 3/3/3/0 would respect the upper bound only;
    # repair takes one partition from a full member so the newcomer d gets 2 or 3.
    previous = Assignment(1, tuple((m,) for m in "aaabbbccc"))
    request = _request({}, ["a", "b", "c", "d"], previous, partitions=9)
    loads = _loads(request, WEIGHTED.assign(request))
    assert sorted(loads.values()) == [2.0, 2.0, 2.0, 3.0]


def test_bounds_load_by_heaviest_partition_when_one_partition_dominates() -> None:
    request = _request({0: 100.0, 1: 1.0, 2: 1.0, 3: 1.0}, ["a", "b", "c"])
    result = WEIGHTED.assign(request)
    _assert_within_bound(request, result)
    assert _loads(request, result) == {"a": 100.0, "b": 2.0, "c": 1.0}


def test_behaves_like_sticky_when_every_partition_weighs_zero() -> None:
    previous = Assignment(1, (("a",), ("a",), ("a",), ("b",)))
    request = _request(dict.fromkeys(range(4), 0.0), ["a", "b", "c"], previous)
    assert WEIGHTED.assign(request) == StickyStrategy().assign(request)


@pytest.mark.parametrize(
    ("weights", "members", "error"),
    [
        ({0: -1.0}, ["a"], NegativeWeightError),
        ({0: math.nan}, ["a"], NegativeWeightError),
        ({0: math.inf}, ["a"], NegativeWeightError),
        ({5: 1.0}, ["a"], InvalidPartitionCountError),
        ({}, [], NoMembersError),
        ({}, [Member("a", 0.0)], NegativeWeightError),
    ],
)
def test_raises_typed_error_when_request_is_invalid(
    weights: dict[int, float], members: list[Member] | list[str], error: type[Exception]
) -> None:
    with pytest.raises(error):
        WEIGHTED.assign(_request(weights, members, partitions=2))


# --- properties -------------------------------------------------------------------


@given(requests())
def test_each_load_is_within_heaviest_weight_of_fair_share_when_previous_is_arbitrary(
    drawn: tuple[AssignmentRequest, random.Random],
) -> None:
    request, _ = drawn
    result = WEIGHTED.assign(request)
    ids = {m.id for m in request.members}
    assert all(len(o) == 1 and o[0] in ids for o in result.assignment.owners)
    assert result.assignment.generation == request.previous.generation + 1
    _assert_within_bound(request, result)


@given(requests(unit=True))
def test_each_count_is_floor_or_ceil_of_share_when_partition_weights_are_unit(
    drawn: tuple[AssignmentRequest, random.Random],
) -> None:
    request, _ = drawn
    loads = _loads(request, WEIGHTED.assign(request))
    capacity = sum(Fraction(m.weight) for m in request.members)
    for member in request.members:
        share = request.partitions * Fraction(member.weight) / capacity
        assert math.floor(share) <= loads[member.id] <= math.ceil(share)


@given(requests())
def test_result_is_identical_when_repeated_or_members_shuffled(
    drawn: tuple[AssignmentRequest, random.Random],
) -> None:
    request, rng = drawn
    first = WEIGHTED.assign(request)
    assert WEIGHTED.assign(request) == first
    members = list(request.members)
    rng.shuffle(members)
    shuffled = AssignmentRequest(
        request.partitions, tuple(members), request.previous, request.options
    )
    assert WEIGHTED.assign(shuffled) == first


@given(requests(dyadic=True))
def test_moves_nothing_when_rerun_on_its_own_result(
    drawn: tuple[AssignmentRequest, random.Random],
) -> None:
    request, _ = drawn
    first = WEIGHTED.assign(request)
    again = AssignmentRequest(
        request.partitions, request.members, first.assignment, request.options
    )
    assert WEIGHTED.assign(again).moved == 0
