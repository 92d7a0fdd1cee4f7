"""The coordination store's rules, written once: membership, leadership terms, assignment
generations, partition holds and project registrations.

``CoordinationState`` is immutable; every write is a method that returns an ``Applied``:
the next state and whether the write was accepted (with the reason when it was not). A
refused write changes nothing. Every store applies these methods as they are: the ports
written once over a key-value dialect (``adapters.coordination``: read, decide here, write
if the revision did not move) and the in-memory adapters. The coordination contract suite
walks every store and this model through the same random steps (joins, leaves, lease
expiries, campaigns, resignations, publishes, claims, releases, registrations: 10 seeds of
200 steps) and requires the same outcomes and states (``tests/contract``).

The rules:

- **members**: one live member per id; ``join`` of a live id is refused, ``leave`` (or the
  expiry of its lease) removes it.
- **leadership**: a leader takes office with a term above every term accepted before (the
  fencing token, so terms only grow); restating the current leadership is accepted and
  changes nothing. ``vacate(term)`` ends that term's leadership, if it is still current.
- **assignment**: ``publish`` is accepted only in the name of the leadership in office (its
  id, exact term and incarnation) and for a generation above the stored one.
- **holds** (the handoff lock on a partition): ``claim`` takes a free partition, or
  replaces exactly the hold version the claimant observed (a holder whose lease expired,
  see ``core.handoff.decide_claim``); ``release`` drops the hold only for its holder.
- **projects**: a registration lives until its expiry (``now + ttl`` of the latest
  register or refresh: a refresh never shortens it); expired registrations are dropped at
  the next registration on their partition and are not listed. A partition holds at most
  ``cap`` live registrations: past it, a new project is refused (refreshing one that is
  live is always accepted), so a flood of new project ids cannot grow the store without
  bound. Times are the caller's clock (seconds); the model only compares them.

Versions (a hold's ``version``, a leader's ``term``) come from the store: its revisions
(``core.keyspace``), the in-memory store's counter. The model only compares them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import TypeVar

from core.model import Assignment, MemberId, Partition

__all__ = [
    "Applied",
    "CoordinationState",
    "Hold",
    "Leader",
    "Registration",
    "registration",
    "replaced_version",
    "supersedes",
    "unseen",
]


@dataclass(frozen=True, slots=True)
class Hold:
    """Who is processing a partition right now (the handoff lock), and since which generation.

    ``version`` is the store's opaque version of the record, used for compare-and-set.
    """

    partition: Partition
    member_id: MemberId
    generation: int
    version: int


@dataclass(frozen=True, slots=True)
class Leader:
    """The leadership in office: ``term`` is its fencing token. ``incarnation`` tells two
    runs of one leader id apart (a leader that restarted under the same id)."""

    leader_id: MemberId
    term: int
    incarnation: str = ""


def unseen(history: Sequence[Assignment], last: int | None) -> list[Assignment]:
    """What an assignment watcher that last yielded generation ``last`` (None: nothing yet)
    yields of ``history`` (the stored assignments, oldest first): a new watcher the newest
    alone, then each newer one once."""
    if last is None:
        return list(history[-1:])
    return [assignment for assignment in history if assignment.generation > last]


def supersedes(published: tuple[int, int], seen: tuple[int, int] | None) -> bool:
    """Whether an assignment published as ``(term, generation)`` is newer than the last one
    an assignment watcher yielded. Ordinarily generations grow and terms grow with them;
    but a store that lost its data (Redis without persistence, or losing its last writes)
    starts generations again under a new leader, whose higher term shows the new history:
    watchers follow it at once instead of waiting for the old count to be passed."""
    return seen is None or published > seen


K = TypeVar("K")
V = TypeVar("V")


def _frozen(items: Mapping[K, V]) -> Mapping[K, V]:
    return MappingProxyType(dict(items))


@dataclass(frozen=True, slots=True)
class CoordinationState:
    """What a coordination store holds. Build the next one with the write methods only."""

    members: frozenset[MemberId] = frozenset()
    leader: Leader | None = None
    max_term: int = 0
    assignment: Assignment | None = None
    assignment_term: int = 0
    holds: Mapping[Partition, Hold] = field(default_factory=lambda: _frozen({}))
    # partition -> project -> when its registration expires (the registrant's clock)
    projects: Mapping[Partition, Mapping[str, float]] = field(default_factory=lambda: _frozen({}))

    # -- members ---------------------------------------------------------------------------

    def join(self, member_id: MemberId) -> Applied:
        if member_id in self.members:
            return self._refused(f"member {member_id!r} is already live")
        return _accepted(replace(self, members=self.members | {member_id}))

    def leave(self, member_id: MemberId) -> Applied:
        """The member left or its lease expired; its holds stay until claimed over."""
        if member_id not in self.members:
            return self._refused(f"member {member_id!r} is not live")
        return _accepted(replace(self, members=self.members - {member_id}))

    # -- leadership ------------------------------------------------------------------------

    def lead(self, leader: Leader) -> Applied:
        if leader == self.leader:
            return Applied(self, accepted=True, reason="this leadership is already in office")
        if leader.term <= self.max_term:
            return self._refused(f"term {leader.term} is not above {self.max_term}")
        return _accepted(replace(self, leader=leader, max_term=leader.term))

    def vacate(self, term: int) -> Applied:
        """The leader of ``term`` resigned or its lease expired."""
        if self.leader is None or self.leader.term != term:
            return self._refused(f"term {term} is not in office")
        return _accepted(replace(self, leader=None))

    # -- assignment ------------------------------------------------------------------------

    def publish(self, assignment: Assignment, fence: Leader) -> Applied:
        """Accepted only in the name of the leadership in office, all of it: a store that
        handed one term out twice (it lost writes) still tells the two apart by their
        incarnation. Refused reasons are what ``FencedError`` says to the leader."""
        term = fence.term
        if self.leader is None:
            return self._refused(f"term {term} is not current: nobody leads now")
        if self.leader.term != term:
            return self._refused(
                f"term {term} is not current: {self.leader.leader_id!r} leads with term "
                f"{self.leader.term}"
            )
        if self.leader != fence:
            return self._refused(
                f"term {term} is held by another leadership ({self.leader.leader_id!r}, "
                f"incarnation {self.leader.incarnation!r})"
            )
        if self.assignment is not None and assignment.generation <= self.assignment.generation:
            return self._refused(
                f"generation {assignment.generation} is not above the stored generation "
                f"{self.assignment.generation} (published by term {self.assignment_term})"
            )
        return _accepted(replace(self, assignment=assignment, assignment_term=term))

    # -- holds -----------------------------------------------------------------------------

    def claim(
        self,
        partition: Partition,
        member_id: MemberId,
        generation: int,
        *,
        replacing: int | None,
        version: int,
    ) -> Applied:
        """Hold ``partition`` if it is free (``replacing`` None) or still held at exactly
        the version ``replacing``; the new hold gets ``version``."""
        current = self.holds.get(partition)
        if replacing is None and current is not None:
            return self._refused(f"partition {partition} is held by {current.member_id}")
        if replacing is not None and (current is None or current.version != replacing):
            return self._refused(f"the observed hold on partition {partition} changed")
        hold = Hold(partition, member_id, generation, version)
        return _accepted(replace(self, holds=_frozen({**self.holds, partition: hold})))

    def release(self, partition: Partition, member_id: MemberId) -> Applied:
        current = self.holds.get(partition)
        if current is None or current.member_id != member_id:
            return self._refused(f"partition {partition} is not held by {member_id}")
        return _accepted(
            replace(self, holds=_frozen({p: h for p, h in self.holds.items() if p != partition}))
        )

    # -- projects --------------------------------------------------------------------------

    def register_projects(
        self,
        partition: Partition,
        project_ids: Iterable[str],
        *,
        now: float,
        ttl: float,
        cap: int,
    ) -> Applied:
        """Register (or refresh) each of ``project_ids`` on ``partition`` until ``now +
        ttl``, in order: first the partition's registrations expired at ``now`` are dropped,
        then a project not live is added only while fewer than ``cap`` are live. Always
        accepted (the others are registered even when some are refused); the refused ones
        are named in the reason, and ``registration`` tells them apart."""
        ids = registration_ids(project_ids, ttl=ttl, cap=cap)
        live = {p: t for p, t in self.projects.get(partition, {}).items() if t > now}
        registered, expiries = admit_registrations(
            ids, live, now=now, ttl=ttl, room=cap - len(live)
        )
        live.update(expiries)
        refused = [i for i in ids if i in registered.refused]
        projects = {p: r for p, r in self.projects.items() if p != partition}
        if live:
            projects[partition] = _frozen(live)
        state = replace(self, projects=_frozen(dict(sorted(projects.items()))))
        if refused:
            return Applied(
                state,
                accepted=True,
                reason=f"partition {partition} holds {cap} projects, the most it takes: "
                f"refused {len(refused)} ({', '.join(refused[:5])}"
                f"{', ...' if len(refused) > 5 else ''})",
            )
        return _accepted(state)

    def live_projects(self, partition: Partition, now: float) -> frozenset[str]:
        """The projects registered on ``partition`` whose registration has not expired at
        ``now``."""
        return frozenset(p for p, t in self.projects.get(partition, {}).items() if t > now)

    # -- helpers ---------------------------------------------------------------------------

    def _refused(self, reason: str) -> Applied:
        return Applied(self, accepted=False, reason=reason)


def _accepted(state: CoordinationState) -> Applied:
    return Applied(state, accepted=True)


@dataclass(frozen=True, slots=True)
class Applied:
    """The outcome of one write: the next state (the same one when refused)."""

    state: CoordinationState
    accepted: bool
    reason: str = ""


@dataclass(frozen=True, slots=True)
class Registration:
    """What ``ProjectRegistry.register`` did: ``added`` were not registered (or had
    expired) and are now; ``refused`` were not live and found the partition full (at its
    cap). The rest were refreshed."""

    added: frozenset[str] = frozenset()
    refused: frozenset[str] = frozenset()


def replaced_version(partition: Partition, replacing: Hold | None) -> int | None:
    """The hold version a claim of ``partition`` replaces (None: the partition is free);
    ``ValueError`` for a hold on another partition (every hold store checks the same)."""
    if replacing is None:
        return None
    if replacing.partition != partition:
        raise ValueError(f"cannot claim partition {partition} replacing a hold on {replacing}")
    return replacing.version


def registration_ids(project_ids: Iterable[str], *, ttl: float, cap: int) -> list[str]:
    """The distinct ids of a ``ProjectRegistry.register`` call, in order; ``ValueError``
    for a TTL that is not positive or a negative cap (every registry checks the same)."""
    if ttl <= 0 or cap < 0:
        raise ValueError(f"ttl must be positive and cap not negative (ttl={ttl}, cap={cap})")
    return list(dict.fromkeys(project_ids))


def admit_registrations(
    ids: Iterable[str], stored: Mapping[str, float], *, now: float, ttl: float, room: int
) -> tuple[Registration, dict[str, float]]:
    """What a partition admits of distinct ``ids``, in order, and each admitted id's new
    expiry. ``stored``: the expiries the partition has for some of them; an id stored
    takes no room (its entry is there already) and one not stored takes one of ``room``
    slots while any is left, else it is refused. Added: admitted and not live at ``now``.
    A refresh never shortens a registration."""
    expires = now + ttl
    added: set[str] = set()
    refused: set[str] = set()
    expiries: dict[str, float] = {}
    for project_id in ids:
        before = stored.get(project_id)
        if before is None:
            if room <= 0:
                refused.add(project_id)
                continue
            room -= 1
        if before is None or before <= now:
            added.add(project_id)
        expiries[project_id] = expires if before is None else max(before, expires)
    return Registration(added=frozenset(added), refused=frozenset(refused)), expiries


def registration(
    before: CoordinationState,
    after: CoordinationState,
    partition: Partition,
    project_ids: Iterable[str],
    now: float,
) -> Registration:
    """The ``Registration`` that took the store from ``before`` to ``after``."""
    was = before.live_projects(partition, now)
    now_live = after.live_projects(partition, now)
    ids = set(project_ids)
    return Registration(
        added=frozenset(i for i in ids if i in now_live and i not in was),
        refused=frozenset(i for i in ids if i not in now_live),
    )
