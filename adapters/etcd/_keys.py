"""The key layout under ``/shoal/{group}`` (see docs/architecture.md)."""

from __future__ import annotations

from dataclasses import dataclass

from core.model import MemberId, Partition


@dataclass(frozen=True, slots=True)
class Keys:
    root: str

    @property
    def consumers(self) -> str:
        return f"{self.root}/consumers/"

    def consumer(self, member_id: MemberId) -> str:
        return f"{self.consumers}{member_id}"

    @property
    def reports(self) -> str:
        return f"{self.root}/reports/"

    def report(self, member_id: MemberId) -> str:
        return f"{self.reports}{member_id}"

    @property
    def leader(self) -> str:
        return f"{self.root}/leader"

    @property
    def assignment(self) -> str:
        return f"{self.root}/assignment"

    @property
    def holds(self) -> str:
        return f"{self.root}/holds/"

    def hold(self, partition: Partition) -> str:
        return f"{self.holds}{partition}"

    def projects(self, partition: Partition) -> str:
        return f"{self.root}/projects/{partition}/"

    def project(self, partition: Partition, project_id: str) -> str:
        return f"{self.projects(partition)}{project_id}"
