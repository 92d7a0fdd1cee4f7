"""The key layout under ``shoal:{group}:`` (see docs/architecture.md)."""

from __future__ import annotations

from dataclasses import dataclass

from core.model import MemberId, Partition


@dataclass(frozen=True, slots=True)
class Keys:
    root: str
    """``shoal:{group}:``, with the trailing colon."""

    @property
    def consumers(self) -> str:
        """The prefix of the member keys (``consumers:{id}``, TTL keys)."""
        return f"{self.root}consumers:"

    def consumer(self, member_id: MemberId) -> str:
        return f"{self.consumers}{member_id}"

    @property
    def members(self) -> str:
        """A set of the member ids that may be live (pruned when their key is gone)."""
        return f"{self.root}members"

    @property
    def reports(self) -> str:
        """One hash: field ``{member id}`` -> ``{member token}:{stats JSON}``."""
        return f"{self.root}reports"

    @property
    def leader(self) -> str:
        return f"{self.root}leader"

    @property
    def term(self) -> str:
        """The fencing counter: each election sets it to max(counter + 1, server clock in ms)."""
        return f"{self.root}term"

    @property
    def assignment(self) -> str:
        return f"{self.root}assignment"

    @property
    def holds(self) -> str:
        """One hash: field ``{partition}`` -> hold JSON."""
        return f"{self.root}holds"

    def projects(self, partition: Partition) -> str:
        return f"{self.root}projects:{partition}"

    @property
    def events(self) -> str:
        """The change-event stream every mutating script appends to."""
        return f"{self.root}events"
