"""The coordination model (``core.coordination``): examples, and a hypothesis state
machine in which members join, expire, lead, publish, claim with ``decide_claim`` and
release in any order, checking the invariants the stores must keep."""

from __future__ import annotations

import hypothesis.strategies as st
import pytest
from hypothesis import given, settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from core.coordination import (
    Applied,
    CoordinationState,
    Hold,
    Leader,
    Registration,
    admit_registrations,
    registration,
    registration_ids,
    replaced_version,
    supersedes,
)
from core.handoff import ClaimAction, decide_claim
from core.model import Assignment

MEMBERS = ("a", "b", "c")
PARTITIONS = 3


def accepted(applied: Applied) -> CoordinationState:
    assert applied.accepted, applied.reason
    return applied.state


def test_a_refused_write_returns_the_same_state_and_says_why() -> None:
    state = accepted(CoordinationState().join("a"))
    applied = state.join("a")
    assert not applied.accepted
    assert applied.state is state
    assert applied.reason == "member 'a' is already live"


def test_publish_needs_the_leadership_in_office_and_a_higher_generation() -> None:
    state = CoordinationState()
    one = Assignment.from_members(1, 2, {"a": [0, 1]})
    fence = Leader("l", 5, "token-1")
    assert state.publish(one, fence).reason == "term 5 is not current: nobody leads now"
    state = accepted(state.lead(fence))
    stale = Leader("l", 4, "token-0")
    assert state.publish(one, stale).reason == "term 4 is not current: 'l' leads with term 5"
    # the same term handed out twice (a store that lost writes): told apart by incarnation
    twin = Leader("m", 5, "token-2")
    assert state.publish(one, twin).reason == (
        "term 5 is held by another leadership ('l', incarnation 'token-1')"
    )
    state = accepted(state.publish(one, fence))
    assert state.assignment == one and state.assignment_term == 5
    assert state.publish(one, fence).reason == (
        "generation 1 is not above the stored generation 1 (published by term 5)"
    )


def test_a_term_not_above_every_earlier_one_is_refused_even_after_a_vacancy() -> None:
    state = accepted(CoordinationState().lead(Leader("l", 5, "run-1")))
    assert state.lead(Leader("l", 5, "run-1")).accepted  # restated: no change
    assert state.lead(Leader("l", 5, "run-1")).state is state
    state = accepted(state.vacate(5))
    assert state.leader is None
    assert state.lead(Leader("m", 5)).reason == "term 5 is not above 5"
    assert accepted(state.lead(Leader("m", 6))).leader == Leader("m", 6)


def test_a_claim_replaces_only_the_exact_version_observed() -> None:
    state = accepted(CoordinationState().claim(0, "a", 1, replacing=None, version=10))
    assert state.holds[0] == Hold(0, "a", 1, 10)
    assert state.claim(0, "b", 2, replacing=None, version=11).reason == ("partition 0 is held by a")
    assert not state.claim(0, "b", 2, replacing=9, version=11).accepted
    state = accepted(state.claim(0, "b", 2, replacing=10, version=11))
    assert state.holds[0] == Hold(0, "b", 2, 11)
    assert not state.release(0, "a").accepted  # no longer its hold
    assert 0 not in accepted(state.release(0, "b")).holds


def test_a_registration_expires_unless_refreshed() -> None:
    state = CoordinationState()
    state = accepted(state.register_projects(1, ["p", "q"], now=100.0, ttl=10.0, cap=5))
    state = accepted(state.register_projects(2, ["p"], now=100.0, ttl=10.0, cap=5))
    assert state.live_projects(1, 105.0) == {"p", "q"}
    state = accepted(state.register_projects(1, ["p"], now=108.0, ttl=10.0, cap=5))  # refresh
    assert state.live_projects(1, 110.0) == {"p"}  # q expired at 110
    assert state.live_projects(2, 110.0) == frozenset()
    before = state
    state = accepted(state.register_projects(1, ["q", "p"], now=111.0, ttl=10.0, cap=5))
    assert registration(before, state, 1, ["q", "p"], 111.0) == Registration(added=frozenset("q"))
    # a refresh never shortens a registration
    state = accepted(state.register_projects(1, ["p"], now=112.0, ttl=1.0, cap=5))
    assert state.projects[1]["p"] == 121.0


def test_past_the_cap_new_projects_are_refused_and_live_ones_refreshed() -> None:
    state = accepted(CoordinationState().register_projects(0, "abc", now=0.0, ttl=10.0, cap=3))
    applied = state.register_projects(0, ["d", "a", "e"], now=5.0, ttl=10.0, cap=3)
    assert applied.accepted  # a and the room left are still written
    assert "refused 2 (d, e)" in applied.reason
    assert registration(state, applied.state, 0, "dae", 5.0) == Registration(
        refused=frozenset("de")
    )
    assert applied.state.projects[0]["a"] == 15.0
    # once registrations expire, their room is free again
    applied = applied.state.register_projects(0, ["d"], now=12.0, ttl=10.0, cap=3)
    assert applied.accepted
    assert applied.state.live_projects(0, 12.0) == {"a", "d"}
    assert set(applied.state.projects[0]) == {"a", "d"}  # expired ones are dropped


@given(
    steps=st.lists(
        st.tuples(
            st.integers(0, 2),
            st.lists(st.sampled_from("abcdefg"), max_size=4),
            st.floats(0, 5),
        ),
        max_size=40,
    ),
    cap=st.integers(0, 4),
)
def test_a_partition_never_holds_more_than_its_cap(
    steps: list[tuple[int, list[str], float]], cap: int
) -> None:
    state, now = CoordinationState(), 0.0
    for partition, ids, advance in steps:
        now += advance
        before = state
        state = state.register_projects(partition, ids, now=now, ttl=3.0, cap=cap).state
        assert all(len(projects) <= cap for projects in state.projects.values())
        done = registration(before, state, partition, ids, now)
        assert done.added | done.refused <= set(ids)
        assert state.live_projects(partition, now) >= set(ids) - done.refused


class Cluster(RuleBasedStateMachine):
    """Members that follow the handler's rules against one store that follows the model.

    A member's ``believes`` is what it thinks it holds (claimed, not yet released). An
    expired member is a zombie: it still believes, but its lease check stops it from
    writing, and it drops every belief before it joins again (the handler's rule).
    """

    def __init__(self) -> None:
        super().__init__()
        self.state = CoordinationState()
        self.version = 0
        self.believes: dict[str, set[int]] = {m: set() for m in MEMBERS}
        self.terms: list[int] = []
        self.generations: list[int] = []

    def write(self, applied: Applied) -> bool:
        if applied.accepted:
            self.version += 1
        else:
            assert applied.state is self.state, "a refused write changed the state"
        self.state = applied.state
        return applied.accepted

    @rule(member=st.sampled_from(MEMBERS))
    def join(self, member: str) -> None:
        if member not in self.state.members:
            self.believes[member].clear()
        live = member in self.state.members
        assert self.write(self.state.join(member)) is not live

    @rule(member=st.sampled_from(MEMBERS))
    def expire(self, member: str) -> None:
        self.write(self.state.leave(member))

    @rule(member=st.sampled_from(MEMBERS), term=st.integers(1, 30))
    def lead(self, member: str, term: int) -> None:
        if self.write(self.state.lead(Leader(member, term))) and (
            not self.terms or self.terms[-1] != term
        ):
            self.terms.append(term)

    @precondition(lambda self: self.state.leader is not None)
    @rule()
    def resign(self) -> None:
        assert self.state.leader is not None
        assert self.write(self.state.vacate(self.state.leader.term))

    @rule(generation=st.integers(1, 20), stale_term=st.booleans(), twin=st.booleans())
    def publish(self, generation: int, stale_term: bool, twin: bool) -> None:
        leader = self.state.leader or Leader("nobody", 0)
        fence = Leader(
            leader.leader_id,
            leader.term - (1 if stale_term else 0),
            f"twin-of-{leader.incarnation}" if twin else leader.incarnation,
        )
        assignment = Assignment.from_members(generation, PARTITIONS, {})
        if self.write(self.state.publish(assignment, fence)):
            assert fence == self.state.leader
            self.generations.append(generation)

    @rule(member=st.sampled_from(MEMBERS), partition=st.integers(0, PARTITIONS - 1))
    def claim(self, member: str, partition: int) -> None:
        if member not in self.state.members:
            return  # a zombie's lease check stops it before it touches the store
        decision = decide_claim(member, self.state.holds.get(partition), self.state.members)
        if decision.action is ClaimAction.WAIT:
            return
        replacing = None if decision.replacing is None else decision.replacing.version
        if self.write(
            self.state.claim(partition, member, 1, replacing=replacing, version=self.version + 1)
        ):
            self.believes[member].add(partition)

    @rule(member=st.sampled_from(MEMBERS), partition=st.integers(0, PARTITIONS - 1))
    def release(self, member: str, partition: int) -> None:
        if partition in self.believes[member]:
            self.believes[member].discard(partition)
            self.write(self.state.release(partition, member))

    @invariant()
    def one_live_holder_per_partition(self) -> None:
        for partition in range(PARTITIONS):
            holders = [m for m in self.state.members if partition in self.believes[m]]
            assert len(holders) <= 1, f"partition {partition} held by {holders}"
            if holders:
                assert self.state.holds[partition].member_id == holders[0]

    @invariant()
    def terms_and_generations_only_grow(self) -> None:
        assert self.terms == sorted(set(self.terms))
        assert self.generations == sorted(set(self.generations))
        if self.state.leader is not None:
            assert self.state.leader.term == self.state.max_term


TestCluster = Cluster.TestCase
TestCluster.settings = settings(max_examples=300, stateful_step_count=40, deadline=None)


def test_a_newer_term_supersedes_even_with_a_lower_generation() -> None:
    assert supersedes((5, 1), None)
    assert supersedes((5, 2), (5, 1))
    assert supersedes((7, 1), (5, 40))  # a new leader after the store lost its data
    assert not supersedes((5, 1), (5, 1))
    assert not supersedes((5, 1), (5, 2))
    assert not supersedes((4, 9), (5, 2))


_project = st.sampled_from([f"p{i}" for i in range(12)])


@given(
    st.lists(_project, max_size=12),
    st.dictionaries(_project, st.floats(0.0, 200.0), max_size=8),
    st.floats(0.0, 100.0),
    st.floats(0.5, 100.0),
    st.integers(0, 12),
)
def test_a_partition_admits_new_projects_only_into_free_room_and_never_shortens_one(
    requested: list[str], stored: dict[str, float], now: float, ttl: float, room: int
) -> None:
    ids = registration_ids(requested, ttl=ttl, cap=room)
    registered, expiries = admit_registrations(ids, stored, now=now, ttl=ttl, room=room)
    assert ids == list(dict.fromkeys(requested))
    assert set(expiries) | registered.refused == set(ids)
    assert not set(expiries) & registered.refused
    assert len([i for i in expiries if i not in stored]) <= room
    assert not registered.refused & stored.keys(), "a stored project takes no new room"
    if registered.refused:  # refused only once the room is used up
        assert len([i for i in expiries if i not in stored]) == room
    assert registered.added == {i for i in expiries if stored.get(i, now) <= now}
    for project_id, until in expiries.items():
        assert until >= now + ttl and until >= stored.get(project_id, until)


def test_a_register_call_with_a_bad_ttl_or_cap_is_refused_before_anything() -> None:
    for ttl, cap in ((0.0, 1), (-1.0, 1), (1.0, -1)):
        with pytest.raises(ValueError, match="ttl must be positive"):
            registration_ids(["p"], ttl=ttl, cap=cap)


@given(
    st.integers(0, 255),
    st.one_of(
        st.none(),
        st.builds(Hold, st.integers(0, 255), st.just("m"), st.integers(0, 9), st.integers(0, 99)),
    ),
)
def test_a_claim_replaces_the_version_of_a_hold_on_its_own_partition_only(
    partition: int, replacing: Hold | None
) -> None:
    if replacing is not None and replacing.partition != partition:
        with pytest.raises(ValueError, match="replacing a hold on"):
            replaced_version(partition, replacing)
    else:
        assert replaced_version(partition, replacing) == (
            None if replacing is None else replacing.version
        )
