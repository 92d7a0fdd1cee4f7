"""``LeaseDeadline``: when a lease kept alive by its holder may have expired at the store.

One rule for every store's lease (renewed by ``adapters._lease``): the deadline is the
send time of the last renewal the store confirmed, plus the TTL. The store received that
renewal no earlier than it was sent, so it cannot have expired the lease before the
deadline; past it, the holder must act as if it had. Only a confirmed renewal moves it,
and never back (a late answer to an older request). Times are the holder's monotonic
clock, passed in.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["LeaseDeadline"]


@dataclass(frozen=True, slots=True)
class LeaseDeadline:
    """A lease of ``ttl`` seconds that may have expired at the store from ``at`` on."""

    ttl: float
    at: float

    @classmethod
    def granted(cls, ttl: float, sent: float) -> LeaseDeadline:
        """The deadline of a lease whose grant was sent at ``sent``."""
        return cls(ttl, sent + ttl)

    def renewed(self, sent: float) -> LeaseDeadline:
        """After the store confirmed a renewal sent at ``sent``."""
        return LeaseDeadline(self.ttl, max(self.at, sent + self.ttl))

    def passed(self, now: float, margin: float = 0.0) -> bool:
        """Whether the lease may have expired at ``now`` (or will within ``margin``)."""
        return now + margin >= self.at
