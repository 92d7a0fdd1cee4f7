"""RocketMQ's ``AllocateMessageQueueAveragely``: contiguous, nearly equal blocks."""

from __future__ import annotations

from core.assignment._types import AssignmentRequest, AssignmentResult, diff, validate
from core.model import MemberId

__all__ = ["RangeStrategy"]


class RangeStrategy:
    """Cut partitions ``0..P-1`` into one contiguous block per sorted member id.

    Every member gets ``P // N`` partitions and the first ``P % N`` members one more;
    with fewer partitions than members the last ``N - P`` members get none (as in
    RocketMQ). Balanced and exclusive, but a member leaving shifts every later block:
    24 partitions over 4 members, the second leaving, moves 8. ``previous`` is read
    only for its generation and to report what moved; weights are validated and
    ignored.

    Raises the ``InvalidAssignmentRequest`` subclass that ``validate`` raises.
    """

    name = "range"

    def assign(self, request: AssignmentRequest) -> AssignmentResult:
        validate(request)
        ids = sorted(m.id for m in request.members)
        base, extra = divmod(request.partitions, len(ids))
        owners: list[tuple[MemberId, ...]] = []
        for index, member_id in enumerate(ids):
            size = base + 1 if index < extra else base
            owners.extend((member_id,) for _ in range(size))
        return diff(request.previous, tuple(owners))
