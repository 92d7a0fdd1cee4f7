"""What travels through Kafka for coordination, as compact JSON. Decoding is strict.

- ``MemberMeta``: a session's JoinGroup metadata ``user_data`` (who it is, its role, the
  last broadcast it saw). Fields of older versions (``owned``) are ignored.
- ``Broadcast``: the assignor's result, embedded whole in EVERY member's SyncGroup
  assignment ``user_data``: the Kafka generation, the shoal leader and its term, the
  admitted members and the candidates.
- Stats records: a load report in the compacted stats topic (``KafkaLoadReports``).
- Log records (``LogRecord``): the coordination log's operations (see ``_coord_log``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, StrictInt, StrictStr

from adapters._json import StatsJson, decode_json, stats_to_json
from adapters._json import dumps as shared_dumps
from core.coordination import LeaderSeat, Seat
from core.model import MemberId, MemberStats

__all__ = [
    "CANDIDATE",
    "MEMBER",
    "Broadcast",
    "MemberMeta",
    "Role",
    "decode_broadcast",
    "decode_meta",
    "decode_stats_record",
    "encode_broadcast",
    "encode_meta",
    "encode_stats_record",
]

Role = Literal["member", "candidate"]
MEMBER: Role = "member"
CANDIDATE: Role = "candidate"
_VERSION = 1


def dumps(value: object) -> bytes:
    return shared_dumps(value).encode()


# --- broadcast ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Broadcast:
    """One completed rebalance as every member of it learns it.

    ``members`` are the admitted ``member``-role sessions (one per shoal id); ``rejected``
    the Kafka member ids refused (a live member already has their shoal id). ``max_term``
    is the highest term any assignor knew.
    """

    kgen: int
    group_leader: str
    leader: LeaderSeat | None
    members: Mapping[MemberId, Seat]
    candidates: tuple[Seat, ...]
    rejected: frozenset[str] = frozenset()
    max_term: int = 0

    def present(self, kafka_member_ids: frozenset[str]) -> Broadcast:
        """This broadcast without the sessions that are no longer in the group."""
        leader = self.leader
        if leader is not None and leader.member not in kafka_member_ids:
            leader = None
        return Broadcast(
            kgen=self.kgen,
            group_leader=self.group_leader,
            leader=leader,
            members={i: s for i, s in self.members.items() if s.member in kafka_member_ids},
            candidates=tuple(s for s in self.candidates if s.member in kafka_member_ids),
            rejected=self.rejected,
            max_term=self.max_term,
        )

    def compact(self) -> Broadcast:
        """Without the rejected sessions: what a member reports back as ``seen``."""
        return Broadcast(
            kgen=self.kgen,
            group_leader=self.group_leader,
            leader=self.leader,
            members=self.members,
            candidates=self.candidates,
            max_term=self.max_term,
        )


def _seat_to_json(seat: Seat) -> dict[str, Any]:
    return {"id": seat.id, "inc": seat.inc, "member": seat.member, "since": seat.since}


def broadcast_to_json(broadcast: Broadcast) -> dict[str, Any]:
    leader = broadcast.leader
    return {
        "v": _VERSION,
        "kgen": broadcast.kgen,
        "group_leader": broadcast.group_leader,
        "leader": None
        if leader is None
        else {
            "id": leader.id,
            "inc": leader.inc,
            "member": leader.member,
            "term": leader.term,
            "since": leader.since,
        },
        "members": [_seat_to_json(s) for _, s in sorted(broadcast.members.items())],
        "candidates": [_seat_to_json(s) for s in broadcast.candidates],
        "rejected": sorted(broadcast.rejected),
        "max_term": broadcast.max_term,
    }


def encode_broadcast(broadcast: Broadcast) -> bytes:
    return dumps(broadcast_to_json(broadcast))


def decode_broadcast(raw: bytes) -> Broadcast:
    return decode_json(_BroadcastWire, raw, "broadcast").to_broadcast()


# --- member metadata ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MemberMeta:
    """A session's JoinGroup ``user_data``.

    ``seen`` is the last broadcast it received (compact); ``log_term`` the highest term it
    read in the coordination log.
    """

    role: Role
    id: MemberId
    inc: str
    seen: Broadcast | None = None
    log_term: int = 0


def encode_meta(meta: MemberMeta) -> bytes:
    return dumps(
        {
            "v": _VERSION,
            "role": meta.role,
            "id": meta.id,
            "inc": meta.inc,
            "seen": None if meta.seen is None else broadcast_to_json(meta.seen.compact()),
            "log_term": meta.log_term,
        }
    )


def decode_meta(raw: bytes) -> MemberMeta:
    wire = decode_json(_MetaWire, raw, "member metadata")
    return MemberMeta(
        role=wire.role,
        id=wire.id,
        inc=wire.inc,
        seen=None if wire.seen is None else wire.seen.to_broadcast(),
        log_term=wire.log_term,
    )


# --- stats topic (a member's latest load report, by incarnation) -------------------------


def encode_stats_record(inc: str, stats: MemberStats) -> bytes:
    return dumps({"inc": inc, "stats": stats_to_json(stats)})


def decode_stats_record(raw: bytes) -> tuple[str, MemberStats]:
    wire = decode_json(_StatsRecordWire, raw, "stats record")
    return wire.inc, wire.stats.to_stats()


# --- decoding: the wire shapes, strict but for stats (see ``adapters._json``) --------------


class _Wire(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class _SeatWire(_Wire):
    id: StrictStr
    inc: StrictStr
    member: StrictStr
    since: StrictInt

    def to_seat(self) -> Seat:
        return Seat(self.id, self.inc, self.member, self.since)


class _LeaderSeatWire(_Wire):
    id: StrictStr
    inc: StrictStr
    member: StrictStr
    term: StrictInt
    since: StrictInt


class _BroadcastWire(_Wire):
    kgen: StrictInt
    group_leader: StrictStr
    leader: _LeaderSeatWire | None = None
    members: list[_SeatWire] = []
    candidates: list[_SeatWire] = []
    rejected: list[StrictStr] = []
    max_term: StrictInt = 0

    def to_broadcast(self) -> Broadcast:
        leader = self.leader
        members = [s.to_seat() for s in self.members]
        return Broadcast(
            kgen=self.kgen,
            group_leader=self.group_leader,
            leader=None
            if leader is None
            else LeaderSeat(leader.id, leader.inc, leader.member, leader.term, leader.since),
            members={s.id: s for s in members},
            candidates=tuple(s.to_seat() for s in self.candidates),
            rejected=frozenset(self.rejected),
            max_term=self.max_term,
        )


class _MetaWire(_Wire):
    role: Role
    id: StrictStr
    inc: StrictStr
    seen: _BroadcastWire | None = None
    log_term: StrictInt = 0


class _StatsRecordWire(_Wire):
    inc: StrictStr
    stats: StatsJson = StatsJson()
