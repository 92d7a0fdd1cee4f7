"""Weighted: balance measured partition load, not partition counts, over member capacity."""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Sequence

from core.assignment._sticky import StickyStrategy
from core.assignment._types import AssignmentRequest, AssignmentResult, diff, validate
from core.model import Assignment, Member, MemberId, Partition

__all__ = ["WeightedStrategy"]

_STICKY = StickyStrategy()


class WeightedStrategy:
    """Spread ``options.partition_weights`` (missing: 1.0) over members by ``Member.weight``.

    Notation: ``w_p`` a partition's weight, ``T = sum(w_p)``, ``w_max = max(w_p)``,
    ``c_m`` a member's capacity (its weight), ``C = sum(c_m)``, and ``f_m = T * c_m / C``
    its fair share of the load.

    **Balance bound** (up to floating-point rounding): every member's load is strictly
    within ``w_max`` of its fair share, ``f_m - w_max < load_m < f_m + w_max``. With unit
    partition weights that is ``floor(f_m)`` or ``ceil(f_m)`` partitions, the same
    count balance as ``StickyStrategy``.

    Steps, each keeping the bound's invariants:

    1. keep: each member (by id) keeps its previous partitions, lightest first, while
       its load before the next one is below ``f_m`` (so it ends below ``f_m + w_max``);
       a partition several members owned goes to the first in id order;
    2. place: the rest, heaviest first (then by partition), go to the member with the
       lowest ``load / capacity`` (then partition count / capacity, then id). That member
       is below its fair share (otherwise the placed load would already exceed ``T``),
       so it too ends below ``f_m + w_max``;
    3. repair: while some member is at or below ``f_m - w_max``, it takes the heaviest
       partition of the member with the highest ``load / capacity`` (who is above its
       fair share, so it stays above ``f_m - w_max``, and the taker ends at most at ``f_m``).
       No member ever gives and takes, so this stops after at most ``P`` moves.

    Re-running on its own result with the same inputs moves nothing (exactly so when
    the loads' sums are exact, e.g. integer or dyadic weights): every member passes the
    keep rule for all its partitions and nobody is below the lower bound. When every
    partition weighs 0 there is no load to balance and the result is ``StickyStrategy``'s.
    Deterministic; ``O(P log P + P log N)``. Raises what ``validate`` raises.
    """

    name = "weighted"

    def assign(self, request: AssignmentRequest) -> AssignmentResult:
        validate(request)
        given = request.options.partition_weights
        weights = [float(given.get(p, 1.0)) for p in range(request.partitions)]
        if math.fsum(weights) == 0:
            return _STICKY.assign(request)
        owners = _balance(weights, request.members, request.previous)
        return diff(request.previous, owners)


def _balance(
    weights: Sequence[float], members: Sequence[Member], previous: Assignment
) -> tuple[tuple[MemberId, ...], ...]:
    """Owner tuples for valid inputs with a positive total weight (see the class doc)."""
    ids = sorted(m.id for m in members)
    capacity = {m.id: float(m.weight) for m in members}
    total = math.fsum(weights)
    total_capacity = math.fsum(capacity[m] for m in ids)
    fair = {m: total * capacity[m] / total_capacity for m in ids}
    heaviest = max(weights)

    before: dict[MemberId, list[Partition]] = {m: [] for m in ids}
    for partition, owners in enumerate(previous.owners):
        for member_id in sorted(set(owners)):
            if member_id in before:
                before[member_id].append(partition)

    owner: list[MemberId | None] = [None] * len(weights)
    load = dict.fromkeys(ids, 0.0)
    count = dict.fromkeys(ids, 0)

    def give(partition: Partition, member_id: MemberId) -> None:
        owner[partition] = member_id
        load[member_id] += weights[partition]
        count[member_id] += 1

    for member_id in ids:
        for partition in sorted(before[member_id], key=lambda p: (weights[p], p)):
            if owner[partition] is not None:
                continue
            if load[member_id] >= fair[member_id]:
                break
            give(partition, member_id)

    def ratio(member_id: MemberId) -> tuple[float, float, MemberId]:
        c = capacity[member_id]
        return (load[member_id] / c, count[member_id] / c, member_id)

    rest = sorted(
        (p for p in range(len(weights)) if owner[p] is None), key=lambda p: (-weights[p], p)
    )
    lightest_first = [ratio(m) for m in ids]
    heapq.heapify(lightest_first)
    for partition in rest:
        member_id = heapq.heappop(lightest_first)[2]
        give(partition, member_id)
        heapq.heappush(lightest_first, ratio(member_id))

    floor = {m: fair[m] - heaviest for m in ids}
    _repair(weights, ids, owner=owner, load=load, capacity=capacity, floor=floor)
    return tuple((m,) if m is not None else () for m in owner)


def _repair(
    weights: Sequence[float],
    ids: Sequence[MemberId],
    *,
    owner: list[MemberId | None],
    load: dict[MemberId, float],
    capacity: dict[MemberId, float],
    floor: dict[MemberId, float],
) -> None:
    """Step 3, in place: lift every member above ``floor`` by taking from the most loaded."""
    short = [(load[m] / capacity[m], m) for m in ids if load[m] <= floor[m]]
    if not short:
        return
    heapq.heapify(short)
    owned: dict[MemberId, list[Partition]] = {m: [] for m in ids}
    for partition, member_id in enumerate(owner):
        if member_id is not None:
            owned[member_id].append(partition)
    for parts in owned.values():
        parts.sort(key=lambda p: (weights[p], p))  # heaviest last, popped first
    # A max-heap with lazy deletion: an entry is current only if its ratio still matches.
    fullest = [(-load[m] / capacity[m], m) for m in ids]
    heapq.heapify(fullest)
    moves = 0
    while short and moves < len(owner):  # the cap only matters if rounding breaks the proof
        taker = heapq.heappop(short)[1]
        if load[taker] > floor[taker]:
            continue
        while -fullest[0][0] != load[fullest[0][1]] / capacity[fullest[0][1]]:
            heapq.heappop(fullest)
        giver = fullest[0][1]
        if giver == taker or not owned[giver]:
            return  # only reachable through rounding: nobody is above fair share
        partition = owned[giver].pop()
        owner[partition] = taker
        bisect.insort(owned[taker], partition, key=lambda p: (weights[p], p))
        load[giver] -= weights[partition]
        load[taker] += weights[partition]
        moves += 1
        heapq.heappush(fullest, (-load[giver] / capacity[giver], giver))
        heapq.heappush(fullest, (-load[taker] / capacity[taker], taker))
        if load[taker] <= floor[taker]:
            heapq.heappush(short, (load[taker] / capacity[taker], taker))
