"""Broadcast: every live member owns every partition (the ``broadcast`` consumption mode).

Each member of a broadcast group consumes every message at its own position, so the
assignment is not a division of work: it names, for each partition, all the members.
"""

from __future__ import annotations

from core.assignment._types import AssignmentRequest, AssignmentResult, diff, validate

__all__ = ["BroadcastStrategy"]


class BroadcastStrategy:
    """``owners[p]`` is every member (sorted), for every ``p``.

    A join adds the newcomer everywhere and a leave removes the leaver everywhere; no
    other member gains or loses a partition. Weights are validated and otherwise
    ignored. Raises what ``validate`` raises.
    """

    name = "broadcast"

    def assign(self, request: AssignmentRequest) -> AssignmentResult:
        validate(request)
        everyone = tuple(sorted(m.id for m in request.members))
        return diff(request.previous, (everyone,) * request.partitions)
