"""The least movement any balanced exclusive assignment needs: the yardstick for ``moved``."""

from __future__ import annotations

from core.assignment._quota import proportional_shares
from core.assignment._types import AssignmentRequest, validate

__all__ = ["minimum_moves"]


def minimum_moves(request: AssignmentRequest) -> int:
    """The fewest partitions whose owner set must change, over every balanced exclusive assignment.

    "Balanced" is ``StickyStrategy``'s rule: member ``m`` owns ``floor(s_m)`` or
    ``ceil(s_m)`` partitions, ``s_m = P * weight_m / total_weight``. "Moved" is
    ``diff``'s: the owner tuple differs from ``request.previous``. So a partition can
    stay put only if a single surviving member owned it alone; orphans and partitions
    that had several owners always count. Member ``m`` keeps at most
    ``min(held_m, quota_m)`` of the ``held_m`` partitions it owned alone, and a ceiling
    quota is worth one more kept partition exactly when ``held_m > floor(s_m)``, so::

        minimum = P - sum(min(held_m, floor(s_m))) - min(extra, #{m : held_m > floor(s_m)})

    where ``extra`` is how many ceilings the quotas contain and only members with a
    fractional share count in the last set. Computed independently of
    ``StickyStrategy`` (which must reach it). Raises what ``validate`` raises.
    """
    validate(request)
    held = {m.id: 0 for m in request.members}
    for before in request.previous.owners:
        if len(before) == 1 and before[0] in held:
            held[before[0]] += 1
    shares = proportional_shares(request.partitions, request.members)
    kept = 0
    worth_a_ceiling = 0
    for member_id, count in held.items():
        floor = shares.floors[member_id]
        kept += min(count, floor)
        if count > floor and shares.may_take_extra(member_id):
            worth_a_ceiling += 1
    return request.partitions - kept - min(shares.extra, worth_a_ceiling)
