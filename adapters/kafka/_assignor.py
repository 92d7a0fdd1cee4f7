"""``ShoalAssignor``: the second level of the two-level coordination, run by the group leader.

Kafka's group coordinator (in the broker) tracks the sessions of the group and picks one of
them as the *group leader*; that session runs ``assign()`` over every session's metadata and
the broker hands each session its part. ``assign_group`` (pure) decides, from the sessions'
metadata alone:

1. **Admission** (``core.coordination.seat_members``, the model's ``join``): one
   ``member``-role session per shoal id. A session whose id is already admitted with
   another incarnation is *rejected* (the port's ``MemberExistsError``); the incarnation
   admitted before keeps its seat.
2. **Election** (``core.coordination.elect``, the model's ``lead``): the shoal leader among
   the ``candidate``-role sessions. The incumbent (the leader of the freshest broadcast any
   session reports, same incarnation) stays; otherwise the candidate seen longest wins
   (lowest ``since``, then id). A new leader's term is the Kafka generation, raised above
   every term any session knows (the coordination log's terms included), so terms only
   ever grow, even if Kafka forgets the group.
Every session receives the whole ``Broadcast`` in its assignment's ``user_data``, and no
Kafka-level partition: the group is membership only (shoal's assignment is the leader's,
published through the coordination log, not computed again here).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping

from aiokafka.coordinator.assignors.abstract import (  # type: ignore[import-untyped]
    AbstractPartitionAssignor,
)
from aiokafka.coordinator.protocol import (  # type: ignore[import-untyped]
    ConsumerProtocolMemberAssignment,
    ConsumerProtocolMemberMetadata,
)

from adapters.kafka._coord_codec import (
    CANDIDATE,
    MEMBER,
    Broadcast,
    MemberMeta,
    Role,
    decode_broadcast,
    decode_meta,
    encode_broadcast,
    encode_meta,
)
from core.coordination import Session, elect, rank_candidates, seat_members
from core.model import MemberId

__all__ = ["ASSIGNOR_NAME", "ShoalAssignor", "assign_group"]

_log = logging.getLogger(__name__)

ASSIGNOR_NAME = "shoal"


def assign_group(
    *,
    generation: int,
    group_leader: str,
    members: Mapping[str, MemberMeta | None],
) -> Broadcast:
    """The broadcast for Kafka generation ``generation`` of the sessions ``members``
    (Kafka member id -> decoded metadata; None for a session whose metadata is not ours,
    which gets nothing). Pure and deterministic: the same inputs give the same broadcast."""
    metas = {kid: meta for kid, meta in members.items() if meta is not None}
    previous = _freshest_seen(metas.values())
    known_term = max(
        [0]
        + [m.log_term for m in metas.values()]
        + [m.seen.max_term for m in metas.values() if m.seen is not None]
        + [m.seen.leader.term for m in metas.values() if m.seen and m.seen.leader]
    )
    admitted, rejected = seat_members(
        _sessions(metas, MEMBER), {} if previous is None else previous.members, generation
    )
    candidates = rank_candidates(
        _sessions(metas, CANDIDATE), () if previous is None else previous.candidates, generation
    )
    leader = elect(
        candidates, None if previous is None else previous.leader, generation, known_term
    )
    return Broadcast(
        kgen=generation,
        group_leader=group_leader,
        leader=leader,
        members={seat.id: seat for seat in admitted},
        candidates=candidates,
        rejected=rejected,
        max_term=max(known_term, 0 if leader is None else leader.term),
    )


def _freshest_seen(metas: Iterable[MemberMeta]) -> Broadcast | None:
    seen = [m.seen for m in metas if m.seen is not None]
    return max(seen, key=lambda b: b.kgen, default=None)


def _sessions(metas: Mapping[str, MemberMeta], role: Role) -> list[Session]:
    return [Session(kid, m.id, m.inc) for kid, m in metas.items() if m.role == role]


class ShoalAssignor(AbstractPartitionAssignor):  # type: ignore[misc]
    """The one assignor every shoal session lists (name ``shoal``), holding that session's
    side of the protocol: ``metadata()`` describes the session (identity, role, the last
    broadcast it saw, the highest log term it read),
    ``on_assignment()`` records the broadcast it received, and ``assign()`` — run only
    in the group leader — delegates to ``assign_group``.

    Kafka's ``assign(cluster, members)`` carries no generation; the session sets
    ``generation`` from its JoinGroup response before calling it (under aiokafka's own
    consumer it falls back to the last broadcast's generation + 1).
    """

    name = ASSIGNOR_NAME
    version = 0

    def __init__(
        self,
        *,
        topic: str,
        role: Role,
        member_id: MemberId,
        incarnation: str,
        log_term: Callable[[], int] = lambda: 0,
    ) -> None:
        self.topic = topic
        self.role: Role = role
        self.member_id = member_id
        self.incarnation = incarnation
        self._log_term = log_term
        self.generation: int | None = None  # set by the session before assign()
        self.kafka_member_id = ""  # this session's Kafka member id, set by the session
        self.last: Broadcast | None = None
        self.deposed_term: int | None = None  # the last assign() replaced this leader's term

    def metadata(self, topics: Iterable[str]) -> ConsumerProtocolMemberMetadata:
        meta = MemberMeta(
            role=self.role,
            id=self.member_id,
            inc=self.incarnation,
            seen=self.last,
            log_term=self._log_term(),
        )
        return ConsumerProtocolMemberMetadata(0, sorted(set(topics)), encode_meta(meta))

    def assign(
        self, cluster: object, members: Mapping[str, ConsumerProtocolMemberMetadata]
    ) -> dict[str, ConsumerProtocolMemberAssignment]:
        decoded: dict[str, MemberMeta | None] = {}
        for kid, metadata in members.items():
            try:
                decoded[kid] = decode_meta(bytes(metadata.user_data or b""))
            except ValueError as exc:
                _log.warning("ignoring group member %s: %s", kid, exc)
                decoded[kid] = None
        generation = self.generation
        if generation is None:
            generation = 1 + max(
                (m.seen.kgen for m in decoded.values() if m is not None and m.seen),
                default=0,
            )
        broadcast = assign_group(
            generation=generation,
            group_leader=self.kafka_member_id,
            members=decoded,
        )
        previous = _freshest_seen(m for m in decoded.values() if m is not None)
        before = None if previous is None else previous.leader
        after = broadcast.leader
        self.deposed_term = None
        if before is not None and (
            after is None or (after.id, after.inc) != (before.id, before.inc)
        ):
            self.deposed_term = before.term
        user_data = encode_broadcast(broadcast)
        return {
            kid: ConsumerProtocolMemberAssignment(0, [(self.topic, [])], user_data)
            for kid in members
        }

    def on_assignment(self, assignment: ConsumerProtocolMemberAssignment) -> None:
        self.last = decode_broadcast(bytes(assignment.user_data or b""))
