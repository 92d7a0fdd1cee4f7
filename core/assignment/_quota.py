"""How many partitions each member should own: its proportional share, rounded.

A member of weight ``w`` in a pool of total weight ``W`` has the exact share
``s = P * w / W``. A *balanced* assignment gives every member ``floor(s)`` or
``ceil(s)`` partitions (equal weights: ``P // N`` or ``P // N + 1``); since the
quotas must sum to ``P``, exactly ``P - sum(floor(s))`` members get the ceiling, and
only members whose share is not a whole number can be among them.

Everything here is exact integer arithmetic: weights are turned into integers over a
common denominator, so a share of exactly 3 is never mistaken for 2.9999999.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from core.model import Member, MemberId

__all__ = ["Shares", "balanced_quotas", "proportional_shares", "sticky_quotas"]


@dataclass(frozen=True, slots=True)
class Shares:
    """Each member's exact share ``P * w / W`` split into whole and fractional parts.

    - ``floors[m]``: ``floor(P * w_m / W)``.
    - ``remainders[m]``: the fractional part's numerator over a common denominator;
      0 exactly when the share is a whole number (then ``m`` can never get one more).
    - ``extra``: how many members get ``floor + 1`` in every balanced assignment;
      at least that many members have a nonzero remainder.
    """

    floors: Mapping[MemberId, int]
    remainders: Mapping[MemberId, int]
    extra: int

    def may_take_extra(self, member_id: MemberId) -> bool:
        """True when ``member_id``'s share is fractional, so its quota may be the ceiling."""
        return self.remainders[member_id] > 0


def proportional_shares(partitions: int, members: Sequence[Member]) -> Shares:
    """Split ``partitions`` proportionally to member weight; exact, order-independent.

    ``members`` must already be valid (distinct ids, finite weights > 0, as
    ``validate`` checks); the result does not depend on their order.
    """
    ratios = [m.weight.as_integer_ratio() for m in members]
    # Floats are dyadic rationals, so the lcm is just the largest denominator.
    denominator = math.lcm(*(d for _, d in ratios))
    scaled = [n * (denominator // d) for n, d in ratios]
    total = sum(scaled)
    floors: dict[MemberId, int] = {}
    remainders: dict[MemberId, int] = {}
    for member, weight in zip(members, scaled, strict=True):
        floors[member.id], remainders[member.id] = divmod(partitions * weight, total)
    extra = partitions - sum(floors.values())
    return Shares(floors=floors, remainders=remainders, extra=extra)


def balanced_quotas(partitions: int, members: Sequence[Member]) -> dict[MemberId, int]:
    """Each member's partition count, summing to ``partitions`` (largest-remainder method).

    Every member gets the floor of its proportional share; the members with the largest
    fractional parts (ties: smallest id first) get one more. With equal weights that is
    ``P // N`` each and one more for the first ``P % N`` ids. ``members`` must be valid.
    """
    shares = proportional_shares(partitions, members)
    ranked = sorted(shares.floors, key=lambda m: (-shares.remainders[m], m))
    lucky = set(ranked[: shares.extra])
    return {m: shares.floors[m] + (m in lucky) for m in sorted(shares.floors)}


def sticky_quotas(
    partitions: int,
    members: Sequence[Member],
    held: Mapping[MemberId, int],
    also_held: Mapping[MemberId, int] | None = None,
) -> dict[MemberId, int]:
    """Balanced quotas whose ceilings go where they let the most partitions stay put.

    ``held[m]`` counts the partitions ``m`` owned alone before (those it can keep
    without anything changing); ``also_held[m]`` the ones it shared with other owners
    (keeping one of those still changes its owner set, so it only breaks ties). A
    member can keep ``min(held, quota)``, so a ceiling is worth one kept partition
    exactly when ``held > floor``: those members get the ceilings first, which
    maximises ``sum(min(held[m], quota[m]))`` over all balanced quotas. Remaining ties
    go to the larger fractional part, then the larger ``held``, then the smaller id.
    Missing entries count as 0; ``members`` must be valid.
    """
    shares = proportional_shares(partitions, members)
    extra_held = also_held if also_held is not None else {}

    def priority(m: MemberId) -> tuple[bool, bool, int, int, MemberId]:
        mine = held.get(m, 0)
        floor = shares.floors[m]
        return (
            mine <= floor,  # False sorts first: a ceiling here keeps one more partition
            mine + extra_held.get(m, 0) <= floor,
            -shares.remainders[m],
            -mine,
            m,
        )

    candidates = sorted((m for m in shares.floors if shares.may_take_extra(m)), key=priority)
    lucky = set(candidates[: shares.extra])
    return {m: shares.floors[m] + (m in lucky) for m in sorted(shares.floors)}
