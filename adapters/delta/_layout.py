"""The landing table's layout, shared by its writers and its upkeep: where its log is, how
a commit entry reads, how delta-rs words a refused commit."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pyarrow.fs as pafs

from core.table import LoggedFile

__all__ = [
    "COMMIT_ATTEMPTS",
    "CONFLICT",
    "LOG_FOLDER",
    "PARTITION_COLUMN",
    "CommitEntry",
    "commit_entry",
    "is_local",
]

PARTITION_COLUMN = "date"
LOG_FOLDER = "_delta_log"
# delta-rs tries the next version when another commit took the one it tried (15 times by
# default). Four writers and the compaction ran out of 15 on 0.6 % of commits, and a
# commit given up on costs a rewrite of its batch; each try is a read of the commits since.
COMMIT_ATTEMPTS = 100
CONFLICT = "Concurrent transaction"  # delta-rs's refusal of a fenced commit, in its message


def is_local(uri: str) -> bool:
    """Whether the table at ``uri`` is on a local (or mounted) disk, not an object store."""
    return "://" not in uri


@dataclass(frozen=True, slots=True)
class CommitEntry:
    """One version's log entry: its commit info (with the custom metadata a commit set),
    and the files it added and removed."""

    info: dict[str, Any]
    added: list[LoggedFile] = field(default_factory=list)
    removed: list[LoggedFile] = field(default_factory=list)
    partition_values: dict[str, dict[str, str | None]] = field(default_factory=dict)


def commit_entry(store: pafs.FileSystem, version: int) -> CommitEntry | None:
    """The log entry of ``version``, read from its own file; None when the log does not
    hold it (never written, or cleaned)."""
    try:
        with store.open_input_stream(f"{LOG_FOLDER}/{version:020d}.json") as stream:
            lines = stream.read().decode().splitlines()
    except FileNotFoundError:
        return None
    entry = CommitEntry(info={})
    for action in map(json.loads, filter(None, lines)):
        if "commitInfo" in action:
            entry.info.update(action["commitInfo"])
        for kind, files in (("add", entry.added), ("remove", entry.removed)):
            if kind in action:
                file = action[kind]
                stats = json.loads(file.get("stats") or "{}")
                rows = stats.get("numRecords")
                files.append(
                    LoggedFile(
                        file["path"],
                        bool(file.get("dataChange", True)),
                        None if rows is None else int(rows),
                    )
                )
                if file.get("partitionValues") is not None:
                    entry.partition_values[file["path"]] = dict(file["partitionValues"])
    return entry
