"""Sticky: balanced partition counts, moving as few partitions as balance allows.

The shape of Kafka's ``AbstractStickyAssignor`` (keep owned up to quota, then fill),
made exact: the quotas themselves are chosen so that the number of moved partitions
is the minimum that any balanced exclusive assignment needs (``minimum_moves``).
"""

from __future__ import annotations

from collections.abc import Sequence

from core.assignment._quota import sticky_quotas
from core.assignment._types import AssignmentRequest, AssignmentResult, diff, validate
from core.model import Assignment, Member, MemberId, Partition

__all__ = ["StickyStrategy", "sticky_owners"]


class StickyStrategy:
    """The default strategy: balanced, exclusive, and minimally disruptive.

    Guarantees, for every valid request:

    - exclusive coverage: every partition has exactly one owner, a request member;
    - balance: member ``m`` owns ``floor(s_m)`` or ``ceil(s_m)`` partitions, where
      ``s_m = P * weight_m / total_weight`` is its proportional share (equal weights:
      loads differ by at most one);
    - minimal movement: ``moved == minimum_moves(request)``, the fewest partitions
      whose owner set must change for any assignment with the two properties above;
    - determinism: the result depends only on the request's content, never on the
      order of ``members``.

    Previous owners that left the request are dropped. A partition that had several
    owners before (fan-out) goes to its smallest surviving owner with room, if any.
    Runs in ``O(P + N log N)``. Raises the ``InvalidAssignmentRequest`` subclass that
    ``validate`` raises.
    """

    name = "sticky"

    def assign(self, request: AssignmentRequest) -> AssignmentResult:
        validate(request)
        owners = sticky_owners(request.partitions, request.members, request.previous)
        return diff(request.previous, owners)


def sticky_owners(
    partitions: int, members: Sequence[Member], previous: Assignment
) -> tuple[tuple[MemberId, ...], ...]:
    """The owner tuples ``StickyStrategy`` assigns; inputs must already be valid.

    Steps:

    1. sort what survives of ``previous``: partitions each live member owned alone,
       partitions shared by several owners of which some are live, and orphans;
    2. pick quotas (``sticky_quotas``): ceilings go to members that can fill them
       with partitions they already own alone;
    3. every member keeps its sole partitions up to its quota (lowest ids first);
    4. each shared partition goes to its smallest live owner that still has room;
    5. everything left, in partition order, fills members below quota in id order.
    """
    ids = sorted(m.id for m in members)
    live = frozenset(ids)
    solo: dict[MemberId, list[Partition]] = {m: [] for m in ids}
    shared: list[tuple[Partition, list[MemberId]]] = []
    shared_count = dict.fromkeys(ids, 0)
    pending: list[Partition] = []
    for partition, before in enumerate(previous.owners):
        if len(before) == 1 and before[0] in live:
            solo[before[0]].append(partition)
            continue
        alive = sorted({m for m in before if m in live})
        # A single survivor among several owners still counts as shared: the owner set
        # changes whatever happens, so keeping it there saves no move.
        if len(before) > 1 and alive:
            shared.append((partition, alive))
            for member_id in alive:
                shared_count[member_id] += 1
        else:
            pending.append(partition)

    quotas = sticky_quotas(
        partitions, members, {m: len(solo[m]) for m in ids}, also_held=shared_count
    )
    owner: list[tuple[MemberId, ...]] = [()] * partitions
    load = dict.fromkeys(ids, 0)
    for member_id in ids:
        mine = solo[member_id]
        quota = quotas[member_id]
        for partition in mine[:quota]:
            owner[partition] = (member_id,)
        pending.extend(mine[quota:])
        load[member_id] = min(len(mine), quota)

    for partition, alive in shared:
        for member_id in alive:
            if load[member_id] < quotas[member_id]:
                owner[partition] = (member_id,)
                load[member_id] += 1
                break
        else:
            pending.append(partition)

    pending.sort()
    cursor = 0
    for member_id in ids:
        room = quotas[member_id] - load[member_id]
        for partition in pending[cursor : cursor + room]:
            owner[partition] = (member_id,)
        cursor += room
    if cursor != len(pending):
        # Quotas sum to P and nobody exceeds its quota, so this means a bug, not bad input.
        raise RuntimeError(f"sticky: quotas left {len(pending) - cursor} partitions unplaced")
    return tuple(owner)
