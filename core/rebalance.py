"""The handoff between two generations: who stops what, who starts what, and when.

A rebalance is cooperative: every member that loses a partition stops it, finishes
its in-flight work and releases it; a member that gains a partition starts it only
once every previous owner that lost it has released it or has let its lease expire
(a member whose lease is gone has stopped everything, see docs/architecture.md,
"Handoff"). So an exclusive partition never has two holders, and under fan-out a
partition's holders are always a subset of either its old or its new owner set.

``plan`` lists the steps; ``grantable`` (or the ``HandoffState`` wrapper) tells the
leader or a handler which grants are safe to start given the releases seen so far.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from core.assignment._types import diff
from core.errors import InvalidPartitionCountError
from core.model import Assignment, MemberId, Partition

__all__ = [
    "Grant",
    "HandoffState",
    "RebalancePlan",
    "Revoke",
    "Step",
    "grantable",
    "plan",
]


@dataclass(frozen=True, slots=True)
class Revoke:
    """``member`` must stop ``partition``, finish its in-flight work, then release it."""

    partition: Partition
    member: MemberId


@dataclass(frozen=True, slots=True)
class Grant:
    """``member`` may start ``partition`` once every member in ``waits_for`` released it.

    ``waits_for`` holds the previous owners of ``partition`` that do not own it in the
    new generation, sorted; when it is empty the grant is safe at once (a partition
    nobody held, or a fan-out partition gaining an extra owner).
    """

    partition: Partition
    member: MemberId
    waits_for: tuple[MemberId, ...]


Step = Revoke | Grant


@dataclass(frozen=True, slots=True)
class RebalancePlan:
    """What changes from ``previous_generation`` to ``generation``.

    ``revoked[m]`` / ``granted[m]``: the partitions ``m`` loses / gains, for every
    member of either assignment, sorted, with sorted (possibly empty) tuples.
    ``steps``: every ``Revoke`` (sorted by member, then partition), then every
    ``Grant`` (same order). Executing them in that order, each grant waiting for its
    ``waits_for``, never gives a partition to a new owner while an old one holds it.
    """

    previous_generation: int
    generation: int
    revoked: Mapping[MemberId, tuple[Partition, ...]]
    granted: Mapping[MemberId, tuple[Partition, ...]]
    steps: tuple[Step, ...]

    @property
    def revokes(self) -> tuple[Revoke, ...]:
        return tuple(s for s in self.steps if isinstance(s, Revoke))

    @property
    def grants(self) -> tuple[Grant, ...]:
        return tuple(s for s in self.steps if isinstance(s, Grant))

    @property
    def is_empty(self) -> bool:
        return not self.steps


def plan(old: Assignment, new: Assignment) -> RebalancePlan:
    """The steps that take the members from ``old`` to ``new``.

    ``old`` is the assignment the members may still be acting on (``Assignment.empty``
    at start-up); generations may be skipped, the plan goes straight from one to the
    other.

    Raises ``InvalidPartitionCountError`` when the two assignments have different
    partition counts, and ``ValueError`` when ``new.generation`` is not greater than
    ``old.generation`` (a stale or replayed assignment must not be acted on).
    """
    if old.partitions != new.partitions:
        raise InvalidPartitionCountError(
            f"cannot plan from {old.partitions} partitions to {new.partitions}"
        )
    if new.generation <= old.generation:
        raise ValueError(
            f"new generation {new.generation} is not after old generation {old.generation}"
        )
    changes = diff(old, new.owners)
    revokes = [Revoke(partition=p, member=m) for m, parts in changes.revoked.items() for p in parts]
    grants = [
        Grant(
            partition=p,
            member=m,
            waits_for=tuple(sorted(set(old.owners[p]) - set(new.owners[p]))),
        )
        for m, parts in changes.granted.items()
        for p in parts
    ]
    return RebalancePlan(
        previous_generation=old.generation,
        generation=new.generation,
        revoked=changes.revoked,
        granted=changes.granted,
        steps=(*revokes, *grants),
    )


def grantable(
    rebalance: RebalancePlan,
    released: Iterable[tuple[Partition, MemberId]],
    expired: Iterable[MemberId] = (),
) -> tuple[Grant, ...]:
    """The grants of ``rebalance`` that are safe to start now, in plan order.

    ``released`` holds the ``(partition, member)`` releases received for this plan's
    generation; ``expired`` the members whose lease has expired, which count as having
    released everything. Releases the plan does not wait for are ignored. A grant to a
    member that has itself expired is still listed: nobody will start it, and the
    leader publishes a new generation without that member.
    """
    done = frozenset(released)
    gone = frozenset(expired)
    return tuple(
        g
        for g in rebalance.grants
        if all(m in gone or (g.partition, m) in done for m in g.waits_for)
    )


@dataclass(frozen=True, slots=True)
class HandoffState:
    """The progress of one plan: releases and expiries seen so far (immutable).

    ``release`` and ``expire`` return a new state and are idempotent, so a duplicated
    release or expiry event is harmless.
    """

    plan: RebalancePlan
    released: frozenset[tuple[Partition, MemberId]] = frozenset()
    expired: frozenset[MemberId] = frozenset()

    def release(self, partition: Partition, member: MemberId) -> HandoffState:
        return HandoffState(self.plan, self.released | {(partition, member)}, self.expired)

    def expire(self, member: MemberId) -> HandoffState:
        return HandoffState(self.plan, self.released, self.expired | {member})

    def grantable(self) -> tuple[Grant, ...]:
        """The grants safe to start now (see the module function ``grantable``)."""
        return grantable(self.plan, self.released, self.expired)

    def waiting(self) -> tuple[Grant, ...]:
        """The grants still waiting for a release, in plan order."""
        ready = set(self.grantable())
        return tuple(g for g in self.plan.grants if g not in ready)

    @property
    def complete(self) -> bool:
        """True when every grant of the plan is safe to start."""
        return not self.waiting()
