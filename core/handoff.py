"""Handoff rules: when may a handler start a partition it was granted, and when must the
leader publish a new assignment. Pure functions; the services do the I/O."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from enum import StrEnum

from core.coordination import Hold
from core.model import Assignment, MemberId, Partition

__all__ = [
    "ClaimAction",
    "ClaimDecision",
    "OwnershipChanges",
    "decide_claim",
    "needs_rebalance",
    "ownership_changes",
]


class ClaimAction(StrEnum):
    START = "start"  # the hold is free or already ours: claim it (or keep it) and start
    TAKE_OVER = "take-over"  # the holder's lease is gone: claim by compare-and-set on its hold
    WAIT = "wait"  # a live member still holds it: it is draining; wait for its release


@dataclass(frozen=True, slots=True)
class ClaimDecision:
    action: ClaimAction
    replacing: Hold | None
    reason: str


def decide_claim(
    me: MemberId, hold: Hold | None, live_members: Collection[MemberId]
) -> ClaimDecision:
    """What the new owner of a partition does, given who holds it now.

    The previous owner releases the hold once it has finished and acked its in-flight
    messages; if it died, its lease expired and it is no longer a live member, so its
    stale hold may be replaced. Never two live processors of one partition.
    """
    if hold is None:
        return ClaimDecision(ClaimAction.START, None, "partition is free")
    if hold.member_id == me:
        return ClaimDecision(ClaimAction.START, hold, "already held by this member")
    if hold.member_id not in live_members:
        return ClaimDecision(
            ClaimAction.TAKE_OVER, hold, f"holder {hold.member_id} is gone (lease expired)"
        )
    return ClaimDecision(ClaimAction.WAIT, hold, f"waiting for {hold.member_id} to release")


def needs_rebalance(previous: Assignment | None, members: Collection[MemberId]) -> bool:
    """True when the live members differ from the ones the assignment names, or some
    partition has no owner. A leader reconciles only then, so a periodic pass that finds
    nothing changed publishes nothing."""
    if not members:
        return False
    if previous is None or previous.generation == 0:
        return True
    if any(not owners for owners in previous.owners):
        return True
    return previous.members() != frozenset(members)


@dataclass(frozen=True, slots=True)
class OwnershipChanges:
    """What a handler does with its partitions when a new generation arrives (sorted)."""

    revoke: tuple[Partition, ...]  # owned, no longer ours: drain, land, release
    keep: tuple[Partition, ...]  # still ours: carry on under the new generation
    grant: tuple[Partition, ...]  # newly ours: claim the hold once it is free, then start


def ownership_changes(
    me: MemberId, owned: Collection[Partition], assignment: Assignment, *, accepting: bool
) -> OwnershipChanges:
    """Split ``me``'s partitions between what ``owned`` holds and what ``assignment`` gives.

    A handler that is not ``accepting`` (it is stopping) takes no grant: it only gives
    back. Every owned partition is either revoked or kept, never both."""
    mine = set(assignment.owned_by(me))
    current = set(owned)
    return OwnershipChanges(
        revoke=tuple(sorted(current - mine)),
        keep=tuple(sorted(current & mine)),
        grant=tuple(sorted(mine - current)) if accepting else (),
    )
