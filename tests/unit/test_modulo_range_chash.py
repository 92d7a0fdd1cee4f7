"""Exact expectations for modulo, range and consistent-hash (the reference examples)."""

from __future__ import annotations

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from core.assignment import AssignmentOptions, AssignmentRequest
from core.assignment._consistent_hash import ConsistentHashStrategy, partition_key, ring_hash
from core.assignment._modulo import ModuloStrategy
from core.assignment._range import RangeStrategy
from core.errors import InvalidAssignmentRequest
from core.model import Assignment

FOUR = ["c1", "c2", "c3", "c4"]
WITHOUT_SECOND = ["c1", "c3", "c4"]


def _counts(assignment: Assignment) -> dict[str, int]:
    return {m: len(parts) for m, parts in assignment.by_member().items()}


# --- modulo -----------------------------------------------------------------------


def test_modulo_gives_c1_every_third_then_every_fourth_when_128_partitions_go_from_3_to_4() -> None:
    three = ModuloStrategy().assign(AssignmentRequest.of(128, ["c1", "c2", "c3"]))
    four = ModuloStrategy().assign(AssignmentRequest.of(128, FOUR, three.assignment))

    assert three.assignment.owned_by("c1")[:4] == (0, 3, 6, 9)
    assert three.assignment.owned_by("c1") == tuple(range(0, 128, 3))
    assert four.assignment.owned_by("c1") == tuple(range(0, 128, 4))
    assert four.assignment.owned_by("c4") == tuple(range(3, 128, 4))
    # Partition i keeps its owner only when i % 3 == i % 4, i.e. i % 12 in {0, 1, 2}:
    # 33 of 128 stay, 95 move.
    assert four.moved == 95
    assert four.assignment.generation == 2


def test_modulo_orders_members_by_id_when_given_unsorted() -> None:
    result = ModuloStrategy().assign(AssignmentRequest.of(6, ["b", "c", "a"]))
    assert result.assignment.owners == (("a",), ("b",), ("c",), ("a",), ("b",), ("c",))


def test_modulo_ignores_previous_owners_when_they_differ() -> None:
    previous = Assignment(generation=7, owners=(("z",), ("z",), ("z",), ("z",)))
    result = ModuloStrategy().assign(AssignmentRequest.of(4, ["a", "b"], previous))
    assert result.assignment == Assignment(generation=8, owners=(("a",), ("b",), ("a",), ("b",)))
    assert result.revoked["z"] == (0, 1, 2, 3)
    assert result.moved == 4


# --- range ------------------------------------------------------------------------


def test_range_gives_contiguous_blocks_of_six_when_24_queues_and_4_consumers() -> None:
    result = RangeStrategy().assign(AssignmentRequest.of(24, FOUR))
    assert result.assignment.by_member() == {
        "c1": tuple(range(0, 6)),
        "c2": tuple(range(6, 12)),
        "c3": tuple(range(12, 18)),
        "c4": tuple(range(18, 24)),
    }


def test_range_moves_exactly_8_when_second_of_4_consumers_leaves_24_queues() -> None:
    before = RangeStrategy().assign(AssignmentRequest.of(24, FOUR)).assignment
    after = RangeStrategy().assign(AssignmentRequest.of(24, WITHOUT_SECOND, before))

    # The RocketMQ table: c1 1~6 -> 1~8, c3 13~18 -> 9~16, c4 19~24 -> 17~24.
    assert after.assignment.by_member() == {
        "c1": tuple(range(0, 8)),
        "c3": tuple(range(8, 16)),
        "c4": tuple(range(16, 24)),
    }
    assert after.moved == 8
    assert after.revoked == {"c1": (), "c2": tuple(range(6, 12)), "c3": (16, 17), "c4": ()}
    assert after.granted == {
        "c1": (6, 7),
        "c2": (),
        "c3": (8, 9, 10, 11),
        "c4": (16, 17),
    }


def test_range_gives_first_members_one_extra_when_p_not_divisible_by_n() -> None:
    result = RangeStrategy().assign(AssignmentRequest.of(10, ["a", "b", "c"]))
    assert result.assignment.by_member() == {"a": (0, 1, 2, 3), "b": (4, 5, 6), "c": (7, 8, 9)}


def test_range_leaves_last_members_empty_when_fewer_partitions_than_members() -> None:
    result = RangeStrategy().assign(AssignmentRequest.of(2, ["a", "b", "c"]))
    assert result.assignment.owners == (("a",), ("b",))
    assert "c" not in result.assignment.members()


# --- consistent hash --------------------------------------------------------------


def test_chash_moves_only_the_leavers_queues_when_second_of_4_consumers_leaves() -> None:
    strategy = ConsistentHashStrategy()
    before = strategy.assign(AssignmentRequest.of(24, FOUR)).assignment
    after = strategy.assign(AssignmentRequest.of(24, WITHOUT_SECOND, before))

    leaver = before.owned_by("c2")
    assert after.moved == len(leaver)
    assert after.revoked["c2"] == leaver
    for member in WITHOUT_SECOND:
        assert after.revoked[member] == ()
    # Measured with the default 10 virtual nodes: c2 held 5 (7/5/4/8), and the
    # survivors end 10/4/10 -- fewer moves than range's 8, far from balanced.
    assert _counts(before) == {"c1": 7, "c2": 5, "c3": 4, "c4": 8}
    assert after.moved == 5
    assert _counts(after.assignment) == {"c1": 10, "c3": 4, "c4": 10}


def test_chash_is_a_pure_function_of_the_member_set_when_order_and_previous_change() -> None:
    strategy = ConsistentHashStrategy()
    a = strategy.assign(AssignmentRequest.of(64, ["x", "y", "z"])).assignment
    junk = Assignment(generation=3, owners=(("q",),) * 64)
    b = strategy.assign(AssignmentRequest.of(64, ["z", "x", "y"], junk)).assignment
    assert a.owners == b.owners


@given(
    members=st.sets(st.text(min_size=1, max_size=8), min_size=2, max_size=8),
    partitions=st.integers(min_value=1, max_value=64),
    virtual_nodes=st.integers(min_value=1, max_value=20),
    data=st.data(),
)
def test_chash_moves_only_the_leavers_partitions_when_any_member_leaves(
    members: set[str], partitions: int, virtual_nodes: int, data: st.DataObject
) -> None:
    options = AssignmentOptions(virtual_nodes=virtual_nodes)
    strategy = ConsistentHashStrategy()
    before = strategy.assign(
        AssignmentRequest.of(partitions, sorted(members), options=options)
    ).assignment
    leaver = data.draw(st.sampled_from(sorted(members)))
    survivors = sorted(members - {leaver})
    after = strategy.assign(AssignmentRequest.of(partitions, survivors, before, options))
    assert after.moved == len(before.owned_by(leaver))
    # A member that owns nothing in either generation has no entry at all.
    assert all(after.revoked.get(m, ()) == () for m in survivors)


@given(
    members=st.sets(st.text(min_size=1, max_size=8), min_size=1, max_size=8),
    partitions=st.integers(min_value=1, max_value=64),
    joiner=st.text(min_size=1, max_size=8),
)
def test_chash_moves_only_to_the_joiner_when_a_member_joins(
    members: set[str], partitions: int, joiner: str
) -> None:
    assume(joiner not in members)
    strategy = ConsistentHashStrategy()
    before = strategy.assign(AssignmentRequest.of(partitions, sorted(members))).assignment
    after = strategy.assign(AssignmentRequest.of(partitions, sorted(members | {joiner}), before))
    assert after.granted.get(joiner, ()) == tuple(
        p for p in range(partitions) if before.owners[p] != after.assignment.owners[p]
    )
    assert all(after.granted.get(m, ()) == () for m in members)


def test_chash_puts_a_partition_on_the_first_node_clockwise_when_ring_is_built() -> None:
    # An independent walk of the ring: the smallest node position >= the partition's
    # hash, wrapping to the smallest position overall.
    members = ["a", "b", "c"]
    nodes = sorted((ring_hash(f"{m}-{i}"), m) for m in members for i in range(10))
    result = ConsistentHashStrategy().assign(AssignmentRequest.of(32, members)).assignment
    for partition in range(32):
        position = ring_hash(partition_key(partition))
        clockwise = [m for h, m in nodes if h >= position] or [nodes[0][1]]
        assert result.owners[partition] == (clockwise[0],)


def test_chash_ring_hash_is_md5_prefix_when_key_is_known() -> None:
    # md5("") = d41d8cd98f00b204e9800998ecf8427e
    assert ring_hash("") == 0xD41D8CD98F00B204


@pytest.mark.parametrize("virtual_nodes", [0, -1])
def test_chash_raises_invalid_request_when_virtual_nodes_below_one(virtual_nodes: int) -> None:
    request = AssignmentRequest.of(4, ["a"], options=AssignmentOptions(virtual_nodes=virtual_nodes))
    with pytest.raises(InvalidAssignmentRequest, match="virtual_nodes"):
        ConsistentHashStrategy().assign(request)


def test_chash_balances_better_when_virtual_nodes_grow() -> None:
    def spread(virtual_nodes: int) -> int:
        options = AssignmentOptions(virtual_nodes=virtual_nodes)
        request = AssignmentRequest.of(128, ["c1", "c2", "c3", "c4"], options=options)
        counts = _counts(ConsistentHashStrategy().assign(request).assignment)
        return max(counts.values()) - min(counts.values())

    assert spread(200) < spread(1)
