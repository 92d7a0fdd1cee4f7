"""RocketMQ's ``AllocateMessageQueueConsistentHash``: a hash ring of virtual nodes."""

from __future__ import annotations

import bisect
import hashlib

from core.assignment._types import AssignmentRequest, AssignmentResult, diff, validate
from core.errors import InvalidAssignmentRequest
from core.model import MemberId, Partition

__all__ = ["ConsistentHashStrategy", "partition_key", "ring_hash"]


def ring_hash(key: str) -> int:
    """The ring position of ``key``: the first 8 bytes of its MD5, big-endian.

    RocketMQ's ``MD5Hash`` takes 4 bytes; 8 make collisions between virtual nodes
    negligible. Python's ``hash()`` is salted per process, so it would give every
    process a different ring.
    """
    digest = hashlib.md5(key.encode("utf-8"), usedforsecurity=False).digest()
    return int.from_bytes(digest[:8], "big")


def partition_key(partition: Partition) -> str:
    """The string a partition is hashed by (the NATS subject's ``p{p}`` token)."""
    return f"p{partition}"


class ConsistentHashStrategy:
    """Each partition goes to the first virtual node clockwise of its hash.

    Every member contributes ``options.virtual_nodes`` ring points, hashed from
    ``f"{member_id}-{i}"``. The result depends only on the member set, never on
    ``previous`` (read for the generation and to report what moved), which is what
    makes it move little: when a member leaves only its own partitions move, and a
    joining member only takes partitions from others. The price is balance: with few
    virtual nodes the counts can differ widely, so no balance bound is promised.
    Weights are validated and ignored. Ring ties (two points on one position) go to
    the smaller member id, so the outcome does not depend on input order.

    Raises the ``InvalidAssignmentRequest`` subclass that ``validate`` raises, and
    ``InvalidAssignmentRequest`` itself when ``options.virtual_nodes`` is below 1.
    """

    name = "consistent-hash"

    def assign(self, request: AssignmentRequest) -> AssignmentResult:
        validate(request)
        virtual_nodes = request.options.virtual_nodes
        if isinstance(virtual_nodes, bool) or virtual_nodes < 1:
            raise InvalidAssignmentRequest(
                f"virtual_nodes must be a positive integer, got {virtual_nodes!r}"
            )
        ring: list[tuple[int, MemberId]] = sorted(
            (ring_hash(f"{member.id}-{i}"), member.id)
            for member in request.members
            for i in range(virtual_nodes)
        )
        positions = [position for position, _ in ring]
        owners: list[tuple[MemberId, ...]] = []
        for partition in range(request.partitions):
            # bisect_left: a point exactly at the partition's hash owns it (RocketMQ's
            # tailMap is inclusive); past the last point we wrap to the first.
            index = bisect.bisect_left(positions, ring_hash(partition_key(partition)))
            owners.append((ring[index % len(ring)][1],))
        return diff(request.previous, tuple(owners))
