"""The coordination log: compare-and-set on Kafka by total order.

Kafka has no compare-and-set, but one partition is a total order that every reader sees
the same. So every write is a *request* appended to ``shoal.{group}.coord-log`` and every
reader replays the log with the same pure rules (``LogState.apply``); the outcome of a
request is decided by its position, identically everywhere. The writer reads the log up to
its own record to learn whether it won. A record's offset is its version (a hold's
``version``; a leader's term is chosen by the assignor, see below).

Records (JSON; ``rid`` identifies the request so its writer can find the outcome):

- ``lead {id, inc, term}``: a candidate the group's broadcast named leader takes office.
  Accepted iff ``term`` is above every term accepted so far (or the same leadership is
  restated). The assignor picks terms above every term its sessions read here, so a stale
  leader's late ``lead`` loses.
- ``depose {term}``: the leader of ``term`` resigned, or the group stopped naming it.
  Clears the leader if it still holds ``term``.
- ``publish {id, inc, term, assignment}``: accepted iff exactly that leadership (id, term,
  incarnation) leads and the generation is above the stored one (``FencedError``
  otherwise).
- ``claim {p, member, generation, replacing}``, ``release {p, member}``: the handoff lock,
  a compare-and-set on the hold's version (the offset of the claim that made it).
- ``projects {p, projects, now, ttl, cap}``: register or refresh ``projects`` on ``p`` until
  ``now + ttl``, dropping the registrations of ``p`` expired at ``now``, at most ``cap`` live
  ones (``CoordinationState.register_projects``). The registry appends none when the whole
  batch would be refused, so a partition at its cap adds nothing to the log. (A
  ``project {p, project}`` record of an older version, without expiry, changes nothing:
  handlers register their active projects again.)
- ``snapshot {upto, state}``: the state after every record before offset ``upto``. It is
  *consistent* iff no record that changes the state lies between ``upto`` and itself; a
  reader that knows the state checks that it agrees (and logs an error if it does not),
  a reader that starts at it loads it.

Compaction: the log is kept by time forever (``retention.ms=-1``) and grows with every hold
change and published generation. Once it holds ``coord_log_compact_records`` records, the
leader (``CoordLog.compact``, after a publish) appends a snapshot, reads it back, and when
it is consistent deletes every record before it (``DeleteRecords``): a new reader then
starts at the snapshot. A log that starts past offset 0 anywhere but at a snapshot cannot be
replayed; its records are refused (and logged) rather than decided on a guessed state.
"""

from __future__ import annotations

import logging
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Annotated, Any, Literal

import anyio
from anyio.abc import TaskGroup
from pydantic import BaseModel, ConfigDict, Field, RootModel, StrictInt, StrictStr

from adapters._json import assignment_from_json, assignment_to_json, decode_json
from adapters.kafka._aiokafka import KafkaError, RecordsToDelete, TopicPartition
from adapters.kafka._coord_codec import dumps
from adapters.kafka._coord_tail import Appender, TopicTail
from adapters.kafka._settings import KafkaSettings
from core.coordination import Applied, CoordinationState, Hold, Leader
from core.errors import StoreUnavailableError
from core.model import Assignment

__all__ = ["CoordLog", "LogState"]

_log = logging.getLogger("shoal.adapters.kafka.coord")
_HISTORY = 256  # published assignments kept for watchers that fall behind


class _Record(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    rid: StrictStr = ""


class _Lead(_Record):
    op: Literal["lead"]
    id: StrictStr
    inc: StrictStr
    term: StrictInt


class _Depose(_Record):
    op: Literal["depose"]
    term: StrictInt


class _Publish(_Record):
    op: Literal["publish"]
    id: StrictStr
    inc: StrictStr
    term: StrictInt
    assignment: dict[str, Any]


class _Claim(_Record):
    op: Literal["claim"]
    p: StrictInt
    member: StrictStr
    generation: StrictInt
    replacing: StrictInt | None = None


class _Release(_Record):
    op: Literal["release"]
    p: StrictInt
    member: StrictStr


class _Project(_Record):
    """A registration of an older version, without expiry: ignored."""

    op: Literal["project"]


class _Projects(_Record):
    op: Literal["projects"]
    p: StrictInt
    projects: list[StrictStr]
    now: float
    ttl: float
    cap: StrictInt


class _LeaderWire(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    id: StrictStr
    inc: StrictStr
    term: StrictInt


class _HoldWire(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    p: StrictInt
    member: StrictStr
    generation: StrictInt
    version: StrictInt


class _StateWire(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    leader: _LeaderWire | None = None
    max_term: StrictInt = 0
    assignment: dict[str, Any] | None = None
    assignment_term: StrictInt = 0
    holds: list[_HoldWire] = []
    # partition -> project -> expiry (an older version's ``projects`` lists are dropped)
    registrations: dict[str, dict[str, float]] = {}

    @staticmethod
    def of(model: CoordinationState) -> _StateWire:
        leader = model.leader
        return _StateWire(
            leader=None
            if leader is None
            else _LeaderWire(id=leader.leader_id, inc=leader.incarnation, term=leader.term),
            max_term=model.max_term,
            assignment=None if model.assignment is None else assignment_to_json(model.assignment),
            assignment_term=model.assignment_term,
            holds=[
                _HoldWire(
                    p=h.partition, member=h.member_id, generation=h.generation, version=h.version
                )
                for _, h in sorted(model.holds.items())
            ],
            registrations={
                str(p): dict(sorted(names.items())) for p, names in sorted(model.projects.items())
            },
        )

    def to_state(self) -> CoordinationState:
        leader = self.leader
        return CoordinationState(
            leader=None if leader is None else Leader(leader.id, leader.term, leader.inc),
            max_term=self.max_term,
            assignment=None if self.assignment is None else assignment_from_json(self.assignment),
            assignment_term=self.assignment_term,
            holds=MappingProxyType(
                {h.p: Hold(h.p, h.member, h.generation, h.version) for h in self.holds}
            ),
            projects=MappingProxyType(
                {int(p): MappingProxyType(dict(names)) for p, names in self.registrations.items()}
            ),
        )


class _Snapshot(_Record):
    op: Literal["snapshot"]
    upto: StrictInt
    state: _StateWire


_Request = _Lead | _Depose | _Publish | _Claim | _Release | _Project | _Projects


class _AnyRecord(RootModel[_Request | _Snapshot]):
    root: Annotated[_Request | _Snapshot, Field(discriminator="op")]


@dataclass
class LogState:
    """The replayed state: ``core.coordination``'s model fed with the log's records in
    order, so every reader decides every request the same way."""

    model: CoordinationState = field(default_factory=CoordinationState)
    history: deque[Assignment] = field(default_factory=lambda: deque(maxlen=_HISTORY))
    known: bool = False  # read from offset 0, or from a snapshot
    first: int | None = None  # the first offset read
    last_change: int = 0  # one past the last record that was a request

    def apply(self, offset: int, raw: bytes) -> tuple[str, Applied]:
        """Apply one record: its request id and outcome. ``ValueError`` when malformed, or
        when the state before it is unknown (a log that starts past 0 without a snapshot)."""
        if self.first is None:
            self.first = offset
        record = decode_json(_AnyRecord, raw, "coordination record").root
        if isinstance(record, _Snapshot):
            return record.rid, self._snapshot(record)
        if not self.known:
            if offset != 0:
                raise ValueError(
                    f"the log starts at offset {self.first} with no snapshot: the state "
                    "before it is unknown, so no request can be decided"
                )
            self.known = True
        applied = self._decide(offset, record)
        self.model = applied.state
        self.last_change = offset + 1
        if applied.accepted and isinstance(record, _Publish) and self.model.assignment:
            self.history.append(self.model.assignment)
        return record.rid, applied

    def _snapshot(self, record: _Snapshot) -> Applied:
        if not self.known:
            self.model = record.state.to_state()
            self.known, self.last_change = True, record.upto
            if self.model.assignment is not None:
                self.history.append(self.model.assignment)
            return Applied(self.model, accepted=True, reason="loaded")
        if record.upto < self.last_change:
            return Applied(
                self.model, accepted=False, reason=f"requests follow offset {record.upto}"
            )
        if record.state != _StateWire.of(self.model):
            _log.error(
                "a coordination snapshot disagrees with the replayed state (upto %d): "
                "readers that start from it would diverge",
                record.upto,
            )
            return Applied(self.model, accepted=False, reason="it disagrees with the replay")
        return Applied(self.model, accepted=True, reason="consistent")

    def _decide(self, offset: int, record: _Request) -> Applied:
        model = self.model
        match record:
            case _Lead():
                return model.lead(Leader(record.id, record.term, record.inc))
            case _Depose():
                return model.vacate(record.term)
            case _Publish():
                fence = Leader(record.id, record.term, record.inc)
                return model.publish(assignment_from_json(record.assignment), fence)
            case _Claim():
                return model.claim(
                    record.p,
                    record.member,
                    record.generation,
                    replacing=record.replacing,
                    version=offset,
                )
            case _Release():
                return model.release(record.p, record.member)
            case _Project():
                return Applied(model, accepted=True, reason="a registration without expiry")
            case _Projects():
                return model.register_projects(
                    record.p, record.projects, now=record.now, ttl=record.ttl, cap=record.cap
                )


class CoordLog:
    """The log as one adapter sees it: an appender, and (``tail``) a replayed ``state``."""

    def __init__(
        self,
        settings: KafkaSettings,
        topic: str,
        *,
        tail: bool = True,
        on_change: Callable[[], None] | None = None,
    ) -> None:
        self.settings = settings
        self.state = LogState()
        self._appender = Appender(settings, topic)
        self._tail = TopicTail(settings, topic, self._on_record, on_change) if tail else None
        self._waiting: dict[str, Applied | None] = {}
        self._start = 0  # where this process last cut the log

    @property
    def changes(self) -> Any:
        if self._tail is None:
            raise RuntimeError("this log is write-only")
        return self._tail.changes

    async def start(self, tasks: TaskGroup) -> None:
        await self._appender.start()
        if self._tail is not None:
            await self._tail.start(tasks)

    async def stop(self) -> None:
        try:
            if self._tail is not None:
                await self._tail.stop()
        finally:
            await self._appender.stop()

    async def sync(self) -> None:
        if self._tail is None:
            raise RuntimeError("this log is write-only")
        await self._tail.sync()

    async def post(self, op: str, **fields: object) -> None:
        """Append without waiting for the outcome (a write-only log's only way)."""
        await self._appender.append(op.encode(), dumps({"op": op, "rid": "", **fields}))

    async def request(self, op: str, **fields: object) -> Applied:
        """Append a request and return its outcome once this reader applied it.

        Raises ``StoreUnavailableError`` when it could not be confirmed within
        ``request_timeout`` (then it may or may not have been applied)."""
        _, outcome = await self._request(op, **fields)
        return outcome

    async def _request(self, op: str, **fields: object) -> tuple[int, Applied]:
        if self._tail is None:
            raise RuntimeError("this log is write-only")
        rid = uuid.uuid4().hex
        self._waiting[rid] = None
        try:
            offset = await self._appender.append(
                op.encode(), dumps({"op": op, "rid": rid, **fields})
            )
            timeout = self.settings.request_timeout
            with anyio.move_on_after(timeout):
                while (outcome := self._waiting.get(rid)) is None:
                    await self._tail.changes.event().wait()
                return offset, outcome
            raise StoreUnavailableError(
                f"Kafka: {op} stored but not read back within {timeout:g} s "
                "(it may or may not apply)"
            )
        finally:
            self._waiting.pop(rid, None)

    def due_for_compaction(self) -> bool:
        """The log holds ``coord_log_compact_records`` records or more (as this reader saw
        its start)."""
        if self._tail is None or self.state.first is None:
            return False
        start = max(self.state.first, self._start)
        return self._tail.position - start >= self.settings.coord_log_compact_records

    async def compact(self, admin: Any) -> int | None:
        """Snapshot the replayed state and, if the snapshot is consistent when read back,
        delete every record before it. The new start of the log, or None when the
        snapshot came too late (requests were appended after its ``upto``: try later).
        Raises ``StoreUnavailableError`` when Kafka does not answer."""
        if self._tail is None:
            raise RuntimeError("this log is write-only")
        await self._tail.sync()
        upto = self._tail.position
        state = _StateWire.of(self.state.model).model_dump(mode="json")
        offset, outcome = await self._request("snapshot", upto=upto, state=state)
        if not outcome.accepted:
            _log.info("coordination snapshot at %d not used: %s", offset, outcome.reason)
            return None
        try:
            with anyio.fail_after(self.settings.request_timeout):
                await admin.delete_records(
                    {TopicPartition(self._tail.topic, 0): RecordsToDelete(before_offset=offset)}
                )
        except (TimeoutError, KafkaError) as exc:
            raise StoreUnavailableError(
                f"Kafka: DeleteRecords {self._tail.topic}: {exc!r}"
            ) from exc
        self._start = offset
        _log.info(
            "coordination log compacted: the records before offset %d are deleted (the "
            "snapshot there holds their state)",
            offset,
        )
        return offset

    def _on_record(self, offset: int, key: bytes | None, value: bytes | None) -> None:
        if value is None:
            return
        rid, outcome = self.state.apply(offset, value)
        if rid in self._waiting:
            self._waiting[rid] = outcome
