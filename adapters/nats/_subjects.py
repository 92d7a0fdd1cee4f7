"""Subject layout of the NATS transport (DESIGN "Subjects and keys").

With prefix ``handler.data.partitions`` (the default):

- ``{prefix}.p{p}``                          project announcements (stored)
- ``{prefix}.p{p}.{project}.data``           data (stored)
- ``{prefix}.p{p}.{project}.reg.response``   registration replies (core NATS, never stored)
- ``{dead_letter_prefix}.p{p}.{project}``    dead letters (the dead-letter stream)

The work stream captures exactly ``{prefix}.*`` and ``{prefix}.*.*.data``: a stream
over ``{prefix}.>`` would also store every reg.response (a stream stores any publish
on its subjects, core or not) and, on a WorkQueue stream with no consumer for them,
keep them forever. ``{prefix}.>`` together with ``{prefix}.*`` is refused by the server
(err_code 10052 'subject "x.>" overlaps with "x.*"').
"""

from __future__ import annotations

from dataclasses import dataclass

from core.messages import MessageKind
from core.model import Partition

__all__ = ["ParsedSubject", "Subjects"]


@dataclass(frozen=True, slots=True)
class ParsedSubject:
    partition: Partition
    project_id: str | None
    kind: MessageKind


@dataclass(frozen=True, slots=True)
class Subjects:
    prefix: str
    dead_letter_prefix: str

    def announce(self, partition: Partition) -> str:
        return f"{self.prefix}.p{partition}"

    def data(self, partition: Partition, project_id: str) -> str:
        return f"{self.prefix}.p{partition}.{project_id}.data"

    def for_kind(self, kind: MessageKind, partition: Partition, project_id: str) -> str:
        if kind is MessageKind.ANNOUNCE:
            return self.announce(partition)
        return self.data(partition, project_id)

    def reg_response(self, partition: Partition, project_id: str) -> str:
        return f"{self.prefix}.p{partition}.{project_id}.reg.response"

    def stream_subjects(self) -> list[str]:
        return [f"{self.prefix}.*", f"{self.prefix}.*.*.data"]

    def consumer_filters(self, partition: Partition) -> list[str]:
        """One consumer per partition; filters of two partitions never overlap (err 10100)."""
        return [self.announce(partition), f"{self.prefix}.p{partition}.*.data"]

    @staticmethod
    def consumer_name(partition: Partition) -> str:
        return f"p{partition}"

    def dead_letter(self, partition: Partition, project_id: str | None) -> str:
        return f"{self.dead_letter_prefix}.p{partition}.{project_id or '_'}"

    def dead_letter_subjects(self) -> list[str]:
        return [f"{self.dead_letter_prefix}.>"]

    def parse_dead_letter(self, subject: str) -> ParsedSubject | None:
        """Partition and project of a dead-letter subject (kind data); None if not one."""
        head = self.dead_letter_prefix + ".p"
        if not subject.startswith(head):
            return None
        partition, _, project = subject[len(head) :].partition(".")
        if not partition.isdigit() or not project or "." in project:
            return None
        return ParsedSubject(int(partition), None if project == "_" else project, MessageKind.DATA)

    def parse(self, subject: str) -> ParsedSubject | None:
        """Partition, project and kind of a work-stream subject; None if it is not one."""
        head = self.prefix + "."
        if not subject.startswith(head):
            return None
        tokens = subject[len(head) :].split(".")
        if not tokens[0].startswith("p") or not tokens[0][1:].isdigit():
            return None
        partition = int(tokens[0][1:])
        if len(tokens) == 1:
            return ParsedSubject(partition, None, MessageKind.ANNOUNCE)
        if len(tokens) == 3 and tokens[2] == "data":
            return ParsedSubject(partition, tokens[1], MessageKind.DATA)
        return None
