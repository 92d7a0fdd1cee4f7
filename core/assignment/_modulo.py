"""The reference assignor: partition ``i`` goes to ``sorted(member ids)[i % N]``."""

from __future__ import annotations

from core.assignment._types import AssignmentRequest, AssignmentResult, diff, validate

__all__ = ["ModuloStrategy"]


class ModuloStrategy:
    """Round-robin by partition number over the sorted member ids (the reference design).

    Balanced (owner counts differ by at most one) and exclusive, but it ignores who
    owned what before: growing from N to N+1 members moves most partitions (95 of 128
    going from 3 to 4). ``previous`` is read only for its generation and to report
    what moved; member weights are validated and then ignored.

    Raises the ``InvalidAssignmentRequest`` subclass that ``validate`` raises.
    """

    name = "modulo"

    def assign(self, request: AssignmentRequest) -> AssignmentResult:
        validate(request)
        ids = sorted(m.id for m in request.members)
        owners = tuple((ids[p % len(ids)],) for p in range(request.partitions))
        return diff(request.previous, owners)
