"""Fan-out: the reference's "at most 1/n of the consumers per share" rule.

With ``n`` shares (partitions) and ``A`` consumers: while ``A <= n`` every share has
one owner and consumers hold ``floor(n/A)`` or ``ceil(n/A)`` shares (sticky does
that); once ``A > n`` every consumer holds exactly one share and every share has
``floor(A/n)`` or ``ceil(A/n)`` owners, the ``A mod n`` extra consumers sitting on
distinct shares drawn at random from ``options.seed``. The reference's example:
10 shares and 23 consumers give 2 owners everywhere plus 3 random shares with 3.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import replace

from core.assignment._sticky import StickyStrategy
from core.assignment._types import AssignmentRequest, AssignmentResult, diff, validate
from core.errors import ImpossibleFanOutError
from core.model import Assignment, Member, MemberId, Partition

__all__ = ["FanOutStrategy"]

_STICKY = StickyStrategy()


class FanOutStrategy:
    """Spread ``A`` consumers over ``n`` shares, several owners per share once ``A > n``.

    - ``A <= n``: exactly ``StickyStrategy`` with every weight taken as 1 (one owner
      per share, ``floor(n/A)`` or ``ceil(n/A)`` shares per consumer, minimal moves).
    - ``A > n``: every consumer owns exactly one share; every share has
      ``b = A // n`` or ``b + 1`` owners, and exactly ``A mod n`` shares (distinct by
      construction) have ``b + 1``. Which shares get the extra owner: first those
      that already hold more than ``b`` surviving consumers (so nobody has to leave),
      then the order of a ``random.Random(options.seed)`` shuffle of the shares.
      From an empty previous assignment that is a pure seeded random draw.
    - Stickiness when ``A > n``: a consumer stays on its previous share while the
      share's owner quota allows; the consumers that do not fit, the new ones, and
      those with no previous share fill the shares below quota (ids in order, shares
      in order). Starting from an assignment this strategy produced with ``A >= n``,
      adding one consumer revokes nothing (exactly one share gains the newcomer),
      and removing one moves at most one surviving consumer.

    Member weights are validated and otherwise ignored: the rule counts consumers.
    Raises ``ImpossibleFanOutError`` when ``ceil(A/n)`` exceeds
    ``options.max_owners_per_partition``, and otherwise what ``validate`` raises.
    """

    name = "fan-out"

    def assign(self, request: AssignmentRequest) -> AssignmentResult:
        validate(request)
        shares = request.partitions
        consumers = len(request.members)
        most = -(-consumers // shares)
        bound = request.options.max_owners_per_partition
        if bound is not None and most > bound:
            raise ImpossibleFanOutError(
                f"{consumers} consumers over {shares} partitions need up to {most} owners "
                f"per partition, above max_owners_per_partition={bound}"
            )
        if consumers <= shares:
            unweighted = tuple(Member(m.id) for m in request.members)
            return _STICKY.assign(replace(request, members=unweighted))
        ids = sorted(m.id for m in request.members)
        owners = _spread(shares, ids, request.previous, request.options.seed)
        return diff(request.previous, owners)


def _spread(
    shares: int, ids: Sequence[MemberId], previous: Assignment, seed: int
) -> tuple[tuple[MemberId, ...], ...]:
    """Owner tuples for ``len(ids) > shares`` consumers; ``ids`` sorted and distinct."""
    base, extra = divmod(len(ids), shares)
    live = frozenset(ids)
    held: dict[MemberId, list[Partition]] = {}
    for partition, before in enumerate(previous.owners):
        for member_id in sorted(set(before)):
            if member_id in live:
                held.setdefault(member_id, []).append(partition)

    # Each surviving consumer claims one previous share: the unambiguous ones first,
    # then those that held several pick the least claimed (they come from A <= n).
    claims: list[list[MemberId]] = [[] for _ in range(shares)]
    several: list[MemberId] = []
    for member_id in ids:
        mine = held.get(member_id, [])
        if len(mine) == 1:
            claims[mine[0]].append(member_id)
        elif mine:
            several.append(member_id)
    for member_id in several:
        home = min(held[member_id], key=lambda p: (len(claims[p]), p))
        claims[home].append(member_id)

    order = list(range(shares))
    random.Random(seed).shuffle(order)
    rank = {share: position for position, share in enumerate(order)}
    # A ceiling on a share already holding more than base saves one consumer a move;
    # among equals the seeded draw decides.
    favoured = sorted(range(shares), key=lambda p: (len(claims[p]) <= base, rank[p]))
    quota = [base] * shares
    for share in favoured[:extra]:
        quota[share] = base + 1

    owners: list[list[MemberId]] = [[] for _ in range(shares)]
    placed: set[MemberId] = set()
    for share in range(shares):
        kept = claims[share][: quota[share]]
        owners[share] = kept
        placed.update(kept)
    waiting = [m for m in ids if m not in placed]
    cursor = 0
    for share in range(shares):
        room = quota[share] - len(owners[share])
        owners[share] = owners[share] + waiting[cursor : cursor + room]
        cursor += room
    if cursor != len(waiting):
        raise RuntimeError(f"fan-out: quotas left {len(waiting) - cursor} consumers unplaced")
    return tuple(tuple(sorted(o)) for o in owners)
