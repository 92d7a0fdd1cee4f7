"""The domain's values: members, assignments, member statistics. All frozen."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = [
    "Assignment",
    "Member",
    "MemberId",
    "MemberStats",
    "Partition",
    "is_valid_weight",
]

MemberId = str
Partition = int


@dataclass(frozen=True, slots=True)
class Member:
    """A live consumer as the assignment sees it.

    ``weight`` is the member's relative capacity: a member of weight 2 is given about
    twice the partitions of a member of weight 1. It must be finite and positive.
    """

    id: MemberId
    weight: float = 1.0


@dataclass(frozen=True, slots=True)
class MemberStats:
    """What a handler reports in its membership value (the reference's consumer JSON)."""

    cpu: float = 0.0
    project_count: int = 0
    last_message_id: str = ""
    rate: float = 0.0
    # The member's busiest projects in its recent window, most messages first, as
    # (project id, messages landed): at most the handler's top_projects of them.
    top_projects: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True, slots=True)
class Assignment:
    """Which members own each partition, at one generation.

    ``owners[p]`` is the sorted tuple of member ids that own partition ``p``; in
    exclusive mode it holds at most one id, under fan-out it may hold several, and an
    empty tuple means nobody owns ``p``. Generations start at 0 (nothing assigned yet)
    and every published assignment has a higher one than its predecessor.
    """

    generation: int
    owners: tuple[tuple[MemberId, ...], ...]

    @property
    def partitions(self) -> int:
        return len(self.owners)

    @staticmethod
    def empty(partitions: int) -> Assignment:
        return Assignment(generation=0, owners=((),) * partitions)

    @staticmethod
    def from_members(
        generation: int, partitions: int, by_member: Mapping[MemberId, Iterable[Partition]]
    ) -> Assignment:
        """Build an assignment from ``member -> partitions``; owners come out sorted."""
        owners: list[list[MemberId]] = [[] for _ in range(partitions)]
        for member_id in sorted(by_member):
            for partition in by_member[member_id]:
                owners[partition].append(member_id)
        return Assignment(generation=generation, owners=tuple(tuple(o) for o in owners))

    def by_member(self) -> dict[MemberId, tuple[Partition, ...]]:
        """``member -> sorted partitions`` for every member that owns at least one."""
        result: dict[MemberId, list[Partition]] = {}
        for partition, owners in enumerate(self.owners):
            for member_id in owners:
                result.setdefault(member_id, []).append(partition)
        return {member_id: tuple(parts) for member_id, parts in sorted(result.items())}

    def members(self) -> frozenset[MemberId]:
        return frozenset(m for owners in self.owners for m in owners)

    def owned_by(self, member_id: MemberId) -> tuple[Partition, ...]:
        return tuple(p for p, owners in enumerate(self.owners) if member_id in owners)


def is_valid_weight(value: float) -> bool:
    """True when ``value`` is a finite, non-negative number."""
    return math.isfinite(value) and value >= 0
