"""``InMemoryLedger``: the AcceptanceLedger port as a list (service tests)."""

from __future__ import annotations

from core.messages import LedgerEntry

__all__ = ["InMemoryLedger"]


class InMemoryLedger:
    def __init__(self) -> None:
        self.entries: list[LedgerEntry] = []

    async def record(self, entry: LedgerEntry) -> None:
        self.entries.append(entry)
