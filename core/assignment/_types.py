"""The assignor interface: one request in, one result out, no hidden state."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from core.errors import (
    DuplicateMemberError,
    InvalidPartitionCountError,
    NegativeWeightError,
    NoMembersError,
)
from core.model import Assignment, Member, MemberId, Partition, is_valid_weight

__all__ = [
    "AssignmentOptions",
    "AssignmentRequest",
    "AssignmentResult",
    "Strategy",
    "diff",
    "validate",
]


@dataclass(frozen=True, slots=True)
class AssignmentOptions:
    """Knobs some strategies read; every strategy ignores the ones it does not use.

    - ``virtual_nodes``: ring points per member (consistent-hash).
    - ``seed``: seeds the random draw of fan-out's extra consumers (deterministic).
    - ``max_owners_per_partition``: fan-out's bound on owners of one partition
      (None: no bound beyond the ceil(A/n) balance rule).
    - ``partition_weights``: measured load per partition (weighted); missing
      partitions weigh 1.0.
    """

    virtual_nodes: int = 10
    seed: int = 0
    max_owners_per_partition: int | None = None
    partition_weights: Mapping[Partition, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class AssignmentRequest:
    """Everything a strategy may look at.

    ``previous`` is the assignment in force (``Assignment.empty`` when there is none);
    its owners may include members that are gone, which a strategy must drop.
    """

    partitions: int
    members: tuple[Member, ...]
    previous: Assignment
    options: AssignmentOptions = AssignmentOptions()

    @staticmethod
    def of(
        partitions: int,
        members: list[Member] | tuple[Member, ...] | list[str] | tuple[str, ...],
        previous: Assignment | None = None,
        options: AssignmentOptions | None = None,
    ) -> AssignmentRequest:
        """Convenience constructor: members may be given as plain ids."""
        normalised = tuple(m if isinstance(m, Member) else Member(m) for m in members)
        return AssignmentRequest(
            partitions=partitions,
            members=normalised,
            previous=previous if previous is not None else Assignment.empty(partitions),
            options=options if options is not None else AssignmentOptions(),
        )


@dataclass(frozen=True, slots=True)
class AssignmentResult:
    """The new assignment (generation = previous + 1) and what changes for each member.

    ``revoked[m]`` are the partitions ``m`` owned before and does not own now;
    ``granted[m]`` those it owns now and did not before. Both map every member that
    appears in either assignment, sorted, with sorted partition tuples (possibly empty).
    ``moved`` counts partitions whose owner set changed.
    """

    assignment: Assignment
    revoked: Mapping[MemberId, tuple[Partition, ...]]
    granted: Mapping[MemberId, tuple[Partition, ...]]
    moved: int


class Strategy(Protocol):
    """A stateless assignor: a pure function of the request (Kafka's ConsumerPartitionAssignor)."""

    @property
    def name(self) -> str: ...

    def assign(self, request: AssignmentRequest) -> AssignmentResult:
        """Compute the next assignment.

        Raises an ``InvalidAssignmentRequest`` subclass (and computes nothing) when the
        request is invalid: no members, duplicate ids, bad weights, a partition count
        that is not positive or disagrees with ``previous``, or an impossible fan-out.
        """
        ...


def validate(request: AssignmentRequest) -> None:
    """Raise the typed error for the first thing wrong with ``request``."""
    if isinstance(request.partitions, bool) or request.partitions < 1:
        raise InvalidPartitionCountError(
            f"partitions must be a positive integer, got {request.partitions!r}"
        )
    if request.previous.partitions != request.partitions:
        raise InvalidPartitionCountError(
            f"previous assignment has {request.previous.partitions} partitions, "
            f"request has {request.partitions}"
        )
    if not request.members:
        raise NoMembersError("cannot assign partitions: no members")
    seen: set[MemberId] = set()
    for member in request.members:
        if member.id in seen:
            raise DuplicateMemberError(f"member id {member.id!r} appears more than once")
        seen.add(member.id)
        if not is_valid_weight(member.weight) or member.weight == 0:
            raise NegativeWeightError(
                f"member {member.id!r} has weight {member.weight!r}; weights must be finite and > 0"
            )
    for partition, weight in request.options.partition_weights.items():
        if not 0 <= partition < request.partitions:
            raise InvalidPartitionCountError(
                f"partition weight given for partition {partition}, "
                f"outside 0..{request.partitions - 1}"
            )
        if not is_valid_weight(weight):
            raise NegativeWeightError(
                f"partition {partition} has weight {weight!r}; weights must be finite and >= 0"
            )


def diff(previous: Assignment, owners: tuple[tuple[MemberId, ...], ...]) -> AssignmentResult:
    """Wrap new ``owners`` as the next generation and list revocations and grants."""
    revoked: dict[MemberId, list[Partition]] = {}
    granted: dict[MemberId, list[Partition]] = {}
    moved = 0
    for partition, (old, new) in enumerate(zip(previous.owners, owners, strict=True)):
        for member_id in old:
            revoked.setdefault(member_id, [])
            granted.setdefault(member_id, [])
        for member_id in new:
            revoked.setdefault(member_id, [])
            granted.setdefault(member_id, [])
        if old == new:
            continue
        moved += 1
        for member_id in set(old) - set(new):
            revoked[member_id].append(partition)
        for member_id in set(new) - set(old):
            granted[member_id].append(partition)
    return AssignmentResult(
        assignment=Assignment(generation=previous.generation + 1, owners=owners),
        revoked={m: tuple(revoked[m]) for m in sorted(revoked)},
        granted={m: tuple(granted[m]) for m in sorted(granted)},
        moved=moved,
    )
