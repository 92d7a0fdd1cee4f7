"""The Kafka coordination assignor's ``assign()``, called directly with fake inputs (no broker).

Each ``ShoalAssignor`` stands for one session; ``rebalance`` plays the broker: it collects
every session's ``metadata()``, runs the group leader's ``assign()`` and hands each session
its part through ``on_assignment()``, as Kafka's JoinGroup/SyncGroup do.
"""

from __future__ import annotations

from collections.abc import Mapping

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

TOPIC = "shoal.t.coord"
P = 12


def session(
    member_id: str, role: Role = MEMBER, inc: str | None = None, log_term: int = 0
) -> ShoalAssignor:
    return ShoalAssignor(
        topic=TOPIC,
        role=role,
        member_id=member_id,
        incarnation=inc or f"{member_id}-1",
        log_term=lambda: log_term,
    )


def rebalance(
    generation: int, sessions: Mapping[str, ShoalAssignor]
) -> dict[str, ConsumerProtocolMemberAssignment]:
    """One Kafka generation over ``sessions`` (Kafka member id -> session); the first
    session in the mapping is the group leader."""
    leader_kid, leader = next(iter(sessions.items()))
    leader.generation = generation
    leader.kafka_member_id = leader_kid
    metadata = {kid: s.metadata([TOPIC]) for kid, s in sessions.items()}
    result: dict[str, ConsumerProtocolMemberAssignment] = leader.assign(None, metadata)
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


def group(generation: int, members: Mapping[str, MemberMeta | None]) -> Broadcast:
    return assign_group(generation=generation, group_leader="k0", members=members)


# --- sessions ----------------------------------------------------------------------------


def test_no_session_gets_a_partition_the_group_is_membership_only() -> None:
    sessions = {"k1": session("a"), "k2": session("lead", CANDIDATE)}
    result = rebalance(1, sessions)
    assert partitions_of(result["k1"]) == partitions_of(result["k2"]) == []
    members: dict[str, MemberMeta | None] = {"k1": meta("a"), "k9": None}
    broadcast = group(1, members)
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
    result = leader.assign(None, metadata)
    assert partitions_of(result["k2"]) == []
    assert set(broadcast_of(result).members) == {"a"}


def test_no_member_is_admitted_when_only_candidates_are_in_the_group() -> None:
    broadcast = group(1, {"k1": meta("lead", CANDIDATE)})
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
        members={
            "k2": MemberMeta(MEMBER, "a", "x"),
            "k1": MemberMeta(MEMBER, "a", "y"),
        },
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
    members: dict[str, MemberMeta | None] = {f"k{i}": meta(f"m{i}") for i in range(5)}
    members["kc"] = meta("lead", CANDIDATE, log_term=3)
    assert group(2, members) == group(2, dict(reversed(members.items())))


def test_broadcast_round_trips_when_encoded() -> None:
    sessions = {"k1": session("a"), "k2": session("lead", CANDIDATE)}
    broadcast = broadcast_of(rebalance(4, sessions))
    assert decode_broadcast(encode_broadcast(broadcast)) == broadcast
