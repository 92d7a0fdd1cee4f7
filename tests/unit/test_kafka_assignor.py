"""The Kafka coordination assignor's ``assign()``, called directly with fake inputs (no broker).

Each ``ShoalAssignor`` stands for one session; ``rebalance`` plays the broker: it collects
every session's ``metadata()``, runs the group leader's ``assign()`` and hands each session
its part through ``on_assignment()``, as Kafka's JoinGroup/SyncGroup do.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import pytest
from aiokafka.coordinator.protocol import (  # type: ignore[import-untyped]
    ConsumerProtocolMemberAssignment,
    ConsumerProtocolMemberMetadata,
)

from adapters.kafka._assignor import ShoalAssignor, assign_group
from adapters.kafka._coord_codec import (
    CANDIDATE,
    MEMBER,
    Broadcast,
    MemberMeta,
    Role,
    decode_broadcast,
    encode_broadcast,
)
from core.assignment import strategy_named

TOPIC = "shoal.t.coord"
P = 12


@dataclass(frozen=True)
class FakeCluster:
    """What ``assign()`` reads of aiokafka's ClusterMetadata."""

    partitions: int | None = P

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        if self.partitions is None or topic != TOPIC:
            return None
        return set(range(self.partitions))


def session(
    member_id: str, role: Role = MEMBER, inc: str | None = None, log_term: int = 0
) -> ShoalAssignor:
    return ShoalAssignor(
        topic=TOPIC,
        partitions=P,
        role=role,
        member_id=member_id,
        incarnation=inc or f"{member_id}-1",
        log_term=lambda: log_term,
    )


def rebalance(
    generation: int,
    sessions: Mapping[str, ShoalAssignor],
    cluster: FakeCluster | None = None,
) -> dict[str, ConsumerProtocolMemberAssignment]:
    """One Kafka generation over ``sessions`` (Kafka member id -> session); the first
    session in the mapping is the group leader."""
    leader_kid, leader = next(iter(sessions.items()))
    leader.generation = generation
    leader.kafka_member_id = leader_kid
    metadata = {kid: s.metadata([TOPIC]) for kid, s in sessions.items()}
    result: dict[str, ConsumerProtocolMemberAssignment] = leader.assign(
        cluster or FakeCluster(), metadata
    )
    assert set(result) == set(sessions)
    for kid, assignment in result.items():
        sessions[kid].on_assignment(assignment)
    return result


def broadcast_of(result: Mapping[str, ConsumerProtocolMemberAssignment]) -> Broadcast:
    (raw,) = {bytes(a.user_data) for a in result.values()}  # every member gets the same
    return decode_broadcast(raw)


def partitions_of(assignment: ConsumerProtocolMemberAssignment) -> list[int]:
    return [p for topic, parts in assignment.assignment if topic == TOPIC for p in parts]


def meta(member_id: str, role: Role = MEMBER, **fields: object) -> MemberMeta:
    return MemberMeta(role=role, id=member_id, inc=f"{member_id}-1", **fields)  # type: ignore[arg-type]


def sticky_group(
    generation: int, members: Mapping[str, MemberMeta | None], partitions: int = P
) -> Broadcast:
    return assign_group(
        generation=generation,
        group_leader="k0",
        partitions=partitions,
        members=members,
        strategy=strategy_named("sticky"),
    )


def loads(owners: Iterable[tuple[str, ...]]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for partition_owners in owners:
        for member_id in partition_owners:
            counts[member_id] = counts.get(member_id, 0) + 1
    return counts


# --- partitions --------------------------------------------------------------------------


def test_every_partition_is_owned_and_balanced_when_members_join() -> None:
    sessions = {"k1": session("a"), "k2": session("b"), "k3": session("c")}
    result = rebalance(1, sessions)
    broadcast = broadcast_of(result)
    assert all(len(owners) == 1 for owners in broadcast.owners)
    assert loads(broadcast.owners) == {"a": 4, "b": 4, "c": 4}
    for kid, assignment in result.items():
        shoal_id = sessions[kid].member_id
        assert partitions_of(assignment) == list(broadcast.owned_by(shoal_id))


def test_members_keep_their_partitions_when_one_joins() -> None:
    sessions = {"k1": session("a"), "k2": session("b")}
    rebalance(1, sessions)
    before = {s.member_id: set(s.owned) for s in sessions.values()}
    sessions["k3"] = session("c")
    broadcast = broadcast_of(rebalance(2, sessions))
    assert loads(broadcast.owners) == {"a": 4, "b": 4, "c": 4}
    for member_id in ("a", "b"):
        assert set(broadcast.owned_by(member_id)) <= before[member_id]  # only give, never swap
    assert sum(len(before[m]) - len(broadcast.owned_by(m)) for m in ("a", "b")) == 4


def test_the_leavers_partitions_move_when_a_member_leaves() -> None:
    sessions = {"k1": session("a"), "k2": session("b"), "k3": session("c")}
    rebalance(1, sessions)
    kept = {s.member_id: set(s.owned) for s in sessions.values()}
    del sessions["k2"]
    broadcast = broadcast_of(rebalance(2, sessions))
    assert loads(broadcast.owners) == {"a": 6, "c": 6}
    assert kept["a"] <= set(broadcast.owned_by("a"))
    assert kept["c"] <= set(broadcast.owned_by("c"))


def test_partition_count_comes_from_the_cluster_when_the_topic_is_known() -> None:
    sessions = {"k1": session("a")}
    broadcast = broadcast_of(rebalance(1, sessions, FakeCluster(partitions=5)))
    assert len(broadcast.owners) == 5
    broadcast = broadcast_of(rebalance(2, sessions, FakeCluster(partitions=None)))
    assert len(broadcast.owners) == P  # unknown topic: the configured count


def test_the_latest_report_wins_when_two_members_claim_a_partition() -> None:
    members: dict[str, MemberMeta | None] = {
        "k1": meta("a", owned=(0, 1), owned_kgen=3),
        "k2": meta("b", owned=(1, 2), owned_kgen=4),  # b got 1 later than a's report
    }
    broadcast = sticky_group(5, members, partitions=4)
    assert broadcast.owners[1] == ("b",)
    assert broadcast.owners[0] == ("a",)
    assert broadcast.owners[2] == ("b",)


def test_candidates_and_unknown_sessions_get_no_partitions() -> None:
    sessions = {"k1": session("a"), "k2": session("lead", CANDIDATE)}
    result = rebalance(1, sessions)
    assert partitions_of(result["k2"]) == []
    assert len(partitions_of(result["k1"])) == P
    members: dict[str, MemberMeta | None] = {"k1": meta("a"), "k9": None}
    broadcast = sticky_group(1, members)
    assert set(broadcast.members) == {"a"}
    assert "k9" not in {s.member for s in broadcast.members.values()}


def test_foreign_metadata_is_ignored_when_a_session_is_not_ours() -> None:
    sessions = {"k1": session("a")}
    leader = sessions["k1"]
    leader.generation, leader.kafka_member_id = 1, "k1"
    metadata = {
        "k1": leader.metadata([TOPIC]),
        "k2": ConsumerProtocolMemberMetadata(0, [TOPIC], b"not json"),
    }
    result = leader.assign(FakeCluster(), metadata)
    assert partitions_of(result["k2"]) == []
    assert set(broadcast_of(result).members) == {"a"}


def test_no_partitions_are_owned_when_no_member_is_admitted() -> None:
    broadcast = sticky_group(1, {"k1": meta("lead", CANDIDATE)})
    assert broadcast.owners == ((),) * P
    assert broadcast.members == {}


# --- admission ---------------------------------------------------------------------------


def test_second_incarnation_is_rejected_when_the_id_is_already_admitted() -> None:
    sessions = {"k5": session("a", inc="first")}
    rebalance(1, sessions)
    sessions["k1"] = session("a", inc="second")  # a lower Kafka member id than the first
    broadcast = broadcast_of(rebalance(2, sessions))
    assert broadcast.members["a"].inc == "first"
    assert broadcast.members["a"].since == 1
    assert broadcast.rejected == {"k1"}


def test_one_of_two_new_incarnations_is_admitted_when_they_join_together() -> None:
    broadcast = assign_group(
        generation=1,
        group_leader="k2",
        partitions=P,
        members={
            "k2": MemberMeta(MEMBER, "a", "x"),
            "k1": MemberMeta(MEMBER, "a", "y"),
        },
        strategy=strategy_named("sticky"),
    )
    assert broadcast.members["a"].member == "k1"  # deterministic: lowest Kafka member id
    assert broadcast.rejected == {"k2"}


# --- election ----------------------------------------------------------------------------


def test_leader_is_none_when_no_candidate_is_in_the_group() -> None:
    broadcast = broadcast_of(rebalance(1, {"k1": session("a"), "k2": session("b")}))
    assert broadcast.leader is None


def test_the_lowest_id_leads_when_candidates_arrive_together() -> None:
    sessions = {"k1": session("y", CANDIDATE), "k2": session("x", CANDIDATE)}
    broadcast = broadcast_of(rebalance(3, sessions))
    assert broadcast.leader is not None
    assert (broadcast.leader.id, broadcast.leader.member, broadcast.leader.term) == ("x", "k2", 3)


def test_incumbent_keeps_its_term_when_others_join() -> None:
    sessions = {"k1": session("z", CANDIDATE)}
    first = broadcast_of(rebalance(1, sessions))
    sessions["k2"] = session("a", CANDIDATE)  # sorts first by id, but arrived later
    sessions["k3"] = session("m")
    second = broadcast_of(rebalance(2, sessions))
    assert first.leader is not None
    assert second.leader == first.leader


def test_the_candidate_seen_longest_wins_when_the_leader_leaves() -> None:
    sessions = {"k1": session("a0", CANDIDATE), "k2": session("b", CANDIDATE)}
    assert broadcast_of(rebalance(1, sessions)).leader.id == "a0"  # type: ignore[union-attr]
    sessions["k3"] = session("a", CANDIDATE)
    rebalance(2, sessions)
    del sessions["k1"]
    broadcast = broadcast_of(rebalance(3, sessions))
    assert broadcast.leader is not None
    assert (broadcast.leader.id, broadcast.leader.term) == ("b", 3)  # b: since 1, a: since 2


def test_a_new_incarnation_of_the_leader_gets_a_new_term_when_it_rejoins() -> None:
    sessions = {"k1": session("lead", CANDIDATE, inc="one")}
    first = broadcast_of(rebalance(1, sessions))
    sessions = {"k2": session("lead", CANDIDATE, inc="two"), "k3": session("m")}
    sessions["k3"].last = first  # a member that saw the first leader
    second = broadcast_of(rebalance(2, sessions))
    assert second.leader is not None
    assert (second.leader.inc, second.leader.term) == ("two", 2)


def test_new_term_exceeds_every_known_term_when_the_group_restarted() -> None:
    # Kafka forgot the group (generation 1 again) but the log had reached term 40
    sessions = {"k1": session("lead", CANDIDATE, log_term=40), "k2": session("m", log_term=12)}
    broadcast = broadcast_of(rebalance(1, sessions))
    assert broadcast.leader is not None
    assert broadcast.leader.term == 41
    assert broadcast.max_term == 41


def test_terms_strictly_increase_when_leaders_follow_each_other() -> None:
    terms = []
    observer = session("m")
    for generation, candidate in enumerate(("a", "b", "a", "c"), start=1):
        broadcast = broadcast_of(
            rebalance(
                generation,
                {
                    "k0": observer,
                    f"k{generation}": session(candidate, CANDIDATE, inc=str(generation)),
                },
            )
        )
        assert broadcast.leader is not None
        terms.append(broadcast.leader.term)
    assert terms == sorted(set(terms))


def test_same_inputs_give_the_same_broadcast_when_assigned_twice() -> None:
    members: dict[str, MemberMeta | None] = {
        f"k{i}": meta(f"m{i}", owned=(i,), owned_kgen=1) for i in range(5)
    }
    members["kc"] = meta("lead", CANDIDATE, log_term=3)
    assert sticky_group(2, members) == sticky_group(2, dict(reversed(members.items())))


@pytest.mark.parametrize(
    "name", ["modulo", "range", "consistent-hash", "sticky", "fan-out", "weighted"]
)
def test_every_strategy_assigns_every_partition_when_used_by_the_assignor(name: str) -> None:
    members: dict[str, MemberMeta | None] = {f"k{i}": meta(f"m{i}") for i in range(3)}
    broadcast = assign_group(
        generation=1,
        group_leader="k0",
        partitions=P,
        members=members,
        strategy=strategy_named(name),
    )
    assert all(owners for owners in broadcast.owners)


def test_broadcast_round_trips_when_encoded() -> None:
    sessions = {"k1": session("a"), "k2": session("lead", CANDIDATE)}
    broadcast = broadcast_of(rebalance(4, sessions))
    assert decode_broadcast(encode_broadcast(broadcast)) == broadcast
