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
- ``project {p, project}``: registered once per partition; True the first time.

The log is kept forever (``retention.ms=-1``): it grows with every hold change and every
published generation (about 100 bytes, resp. the assignment's JSON), and a new reader
replays it from the start.
"""

from __future__ import annotations

import logging
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

import anyio
from anyio.abc import TaskGroup
from pydantic import BaseModel, ConfigDict, Field, RootModel, StrictInt, StrictStr

from adapters._json import assignment_from_json, decode_json
from adapters.kafka._coord_codec import dumps
from adapters.kafka._coord_tail import Appender, TopicTail
from adapters.kafka._settings import KafkaSettings
from core.coordination import Applied, CoordinationState, Leader
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
    op: Literal["project"]
    p: StrictInt
    project: StrictStr


class _AnyRecord(RootModel[_Lead | _Depose | _Publish | _Claim | _Release | _Project]):
    root: Annotated[
        _Lead | _Depose | _Publish | _Claim | _Release | _Project, Field(discriminator="op")
    ]


@dataclass
class LogState:
    """The replayed state: ``core.coordination``'s model fed with the log's records in
    order, so every reader decides every request the same way."""

    model: CoordinationState = field(default_factory=CoordinationState)
    history: deque[Assignment] = field(default_factory=lambda: deque(maxlen=_HISTORY))

    def apply(self, offset: int, raw: bytes) -> tuple[str, Applied]:
        """Apply one record: its request id and outcome. ``ValueError`` when malformed."""
        record = decode_json(_AnyRecord, raw, "coordination record").root
        applied = self._decide(offset, record)
        self.model = applied.state
        if applied.accepted and isinstance(record, _Publish) and self.model.assignment:
            self.history.append(self.model.assignment)
        return record.rid, applied

    def _decide(
        self, offset: int, record: _Lead | _Depose | _Publish | _Claim | _Release | _Project
    ) -> Applied:
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
                return model.register_project(record.p, record.project)


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
        if self._tail is None:
            raise RuntimeError("this log is write-only")
        rid = uuid.uuid4().hex
        self._waiting[rid] = None
        try:
            await self._appender.append(op.encode(), dumps({"op": op, "rid": rid, **fields}))
            timeout = self.settings.request_timeout
            with anyio.move_on_after(timeout):
                while (outcome := self._waiting.get(rid)) is None:
                    await self._tail.changes.event().wait()
                return outcome
            raise StoreUnavailableError(
                f"Kafka: {op} stored but not read back within {timeout:g} s "
                "(it may or may not apply)"
            )
        finally:
            self._waiting.pop(rid, None)

    def _on_record(self, offset: int, key: bytes | None, value: bytes | None) -> None:
        if value is None:
            return
        rid, outcome = self.state.apply(offset, value)
        if rid in self._waiting:
            self._waiting[rid] = outcome
