"""The rebalance plan and the handoff gate: revoke first, grant once released."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.errors import InvalidPartitionCountError
from core.model import Assignment
from core.rebalance import Grant, HandoffState, Revoke, grantable, plan

MEMBERS = ("m0", "m1", "m2", "m3", "m4")


def _range_24(members: list[str], generation: int) -> Assignment:
    size = 24 // len(members)
    return Assignment.from_members(
        generation, 24, {m: range(i * size, (i + 1) * size) for i, m in enumerate(members)}
    )


# --- plan: exact expectations --------------------------------------------------------


def test_plan_lists_revokes_before_grants_when_second_of_four_leaves() -> None:
    old = _range_24(["c1", "c2", "c3", "c4"], generation=4)
    new = _range_24(["c1", "c3", "c4"], generation=5)
    result = plan(old, new)

    assert (result.previous_generation, result.generation) == (4, 5)
    assert result.revoked == {"c1": (), "c2": tuple(range(6, 12)), "c3": (16, 17), "c4": ()}
    assert result.granted == {"c1": (6, 7), "c2": (), "c3": (8, 9, 10, 11), "c4": (16, 17)}
    kinds = [type(step) for step in result.steps]
    assert kinds == [Revoke] * 8 + [Grant] * 8
    assert result.revokes[0] == Revoke(partition=6, member="c2")
    assert Grant(partition=16, member="c4", waits_for=("c3",)) in result.grants
    assert all(g.waits_for == ("c2",) for g in result.grants if g.partition < 12)


def test_plan_orders_steps_by_member_then_partition_when_several_members_change() -> None:
    old = Assignment(generation=1, owners=(("b",), ("a",), ("b",), ("a",)))
    new = Assignment(generation=2, owners=(("a",), ("b",), ("a",), ("b",)))
    result = plan(old, new)
    assert result.steps == (
        Revoke(1, "a"),
        Revoke(3, "a"),
        Revoke(0, "b"),
        Revoke(2, "b"),
        Grant(0, "a", ("b",)),
        Grant(2, "a", ("b",)),
        Grant(1, "b", ("a",)),
        Grant(3, "b", ("a",)),
    )


def test_plan_grants_without_waiting_when_starting_from_empty() -> None:
    new = Assignment(generation=1, owners=(("a",), ("b",)))
    result = plan(Assignment.empty(2), new)
    assert result.revokes == ()
    assert result.grants == (Grant(0, "a", ()), Grant(1, "b", ()))
    assert grantable(result, released=()) == result.grants


def test_plan_waits_for_nobody_when_fan_out_adds_an_owner() -> None:
    old = Assignment(generation=1, owners=(("a",),))
    new = Assignment(generation=2, owners=(("a", "b"),))
    assert plan(old, new).steps == (Grant(0, "b", ()),)


def test_plan_is_empty_when_owners_do_not_change() -> None:
    old = Assignment(generation=1, owners=(("a",), ("b",)))
    result = plan(old, Assignment(generation=2, owners=old.owners))
    assert result.is_empty
    assert result.revoked == {"a": (), "b": ()}


def test_plan_raises_invalid_partition_count_when_sizes_differ() -> None:
    with pytest.raises(InvalidPartitionCountError):
        plan(Assignment.empty(3), Assignment(generation=1, owners=(("a",),) * 4))


@pytest.mark.parametrize("new_generation", [3, 2])
def test_plan_raises_value_error_when_generation_does_not_increase(new_generation: int) -> None:
    old = Assignment(generation=3, owners=(("a",),))
    with pytest.raises(ValueError, match="generation"):
        plan(old, Assignment(generation=new_generation, owners=(("b",),)))


# --- the handoff gate: exact expectations ----------------------------------------------


def _a_to_b() -> HandoffState:
    old = Assignment(generation=1, owners=(("a",), ("a",), ("c",)))
    new = Assignment(generation=2, owners=(("b",), ("b",), ("b",)))
    return HandoffState(plan(old, new))


def test_grant_waits_when_previous_owner_has_not_released() -> None:
    state = _a_to_b()
    assert state.grantable() == ()
    assert not state.complete


def test_grant_starts_when_previous_owner_released_that_partition() -> None:
    state = _a_to_b().release(0, "a")
    assert state.grantable() == (Grant(0, "b", ("a",)),)
    assert [g.partition for g in state.waiting()] == [1, 2]


def test_grants_start_when_previous_owner_lease_expired() -> None:
    state = _a_to_b().expire("a")
    assert [g.partition for g in state.grantable()] == [0, 1]
    assert state.expire("c").complete


def test_release_is_ignored_when_the_plan_does_not_wait_for_it() -> None:
    state = _a_to_b().release(0, "c").release(2, "a").release(7, "z")
    assert state.grantable() == ()


def test_release_is_idempotent_when_delivered_twice() -> None:
    once = _a_to_b().release(0, "a")
    assert once.release(0, "a") == once


# --- properties ------------------------------------------------------------------------


@st.composite
def _owner_sets(draw: st.DrawFn, partitions: int, fan_out: bool) -> tuple[tuple[str, ...], ...]:
    one = st.one_of(st.just(()), st.sampled_from(MEMBERS).map(lambda m: (m,)))
    many = st.sets(st.sampled_from(MEMBERS), max_size=3).map(lambda s: tuple(sorted(s)))
    return tuple(draw(many if fan_out else one) for _ in range(partitions))


@st.composite
def _generations(draw: st.DrawFn) -> tuple[Assignment, Assignment]:
    partitions = draw(st.integers(min_value=1, max_value=10))
    fan_out = draw(st.booleans())
    old_generation = draw(st.integers(min_value=0, max_value=5))
    new_generation = old_generation + draw(st.integers(min_value=1, max_value=3))
    return (
        Assignment(old_generation, draw(_owner_sets(partitions, fan_out))),
        Assignment(new_generation, draw(_owner_sets(partitions, fan_out))),
    )


@given(generations=_generations(), data=st.data())
def test_no_partition_has_old_and_new_holders_when_releases_arrive_in_any_order(
    generations: tuple[Assignment, Assignment], data: st.DataObject
) -> None:
    old, new = generations
    rebalance = plan(old, new)
    expiring = data.draw(st.sets(st.sampled_from(MEMBERS), max_size=2), label="expiring")
    events: list[tuple[int, str] | str] = [(r.partition, r.member) for r in rebalance.revokes]
    events += sorted(expiring)
    order = data.draw(st.permutations(events), label="order")

    # Who is actually processing each partition. A revoked member stops on release; a
    # member whose lease expired has stopped everything. Grants start as soon as the
    # gate allows, the earliest (so the most dangerous) moment.
    holders = [set(owners) for owners in old.owners]
    state = HandoffState(rebalance)
    started: set[Grant] = set()

    def start_and_check() -> None:
        ready = state.grantable()
        for grant in rebalance.grants:
            leaving = set(old.owners[grant.partition]) - set(new.owners[grant.partition])
            # Independent oracle: startable exactly when no leaving owner still holds it.
            assert (grant in ready) == (not holders[grant.partition] & leaving)
        for grant in ready:
            if grant not in started:
                started.add(grant)
                holders[grant.partition].add(grant.member)
        for p, held in enumerate(holders):
            before, after = set(old.owners[p]), set(new.owners[p])
            assert held <= before | after
            assert not (held & (before - after) and held & (after - before))
            if len(before) <= 1 and len(after) <= 1:
                assert len(held) <= 1

    start_and_check()
    for event in order:
        if isinstance(event, tuple):
            partition, member = event
            holders[partition].discard(member)
            state = state.release(partition, member)
        else:
            for held in holders:
                held.discard(event)
            state = state.expire(event)
        start_and_check()

    assert state.complete
    assert started == set(rebalance.grants)
    if not expiring:
        assert tuple(tuple(sorted(h)) for h in holders) == new.owners


@given(generations=_generations())
def test_plan_steps_rebuild_the_new_assignment_when_applied_to_the_old(
    generations: tuple[Assignment, Assignment],
) -> None:
    old, new = generations
    rebalance = plan(old, new)
    owners = [set(o) for o in old.owners]
    seen_grant = False
    for step in rebalance.steps:
        if isinstance(step, Revoke):
            assert not seen_grant, "a revoke came after a grant"
            assert step.member in owners[step.partition]
            owners[step.partition].discard(step.member)
        else:
            seen_grant = True
            assert step.member not in owners[step.partition]
            owners[step.partition].add(step.member)
    assert tuple(tuple(sorted(o)) for o in owners) == new.owners
    assert sum(len(v) for v in rebalance.revoked.values()) == len(rebalance.revokes)
    assert sum(len(v) for v in rebalance.granted.values()) == len(rebalance.grants)
