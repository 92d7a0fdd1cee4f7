"""Compaction in a child process: ``python -m adapters.delta._compaction`` reads one request
as JSON on stdin (``uri``, ``storage_options``, ``days``, ``target_bytes``), merges those
days' files with delta-rs's ``optimize.compact`` (one commit) and prints
``{"removed": n, "added": m}``. A failure exits 1 with the error on stderr.

Why a process: delta-rs holds a target file's worth of rows while it writes one (140 MB
above a fresh process for a file of 300,000 rows), and a process returns what it took only
when it ends. In its own process the compaction leaves the leader's memory where it was,
and one that runs out of memory takes nothing else down with it."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence

from deltalake import DeltaTable

from adapters.delta._table import PARTITION_COLUMN

__all__ = ["compact_days"]


def compact_days(
    uri: str, storage_options: Mapping[str, str] | None, days: Sequence[str], target_bytes: int
) -> tuple[int, int]:
    """Files removed and added by compacting ``days`` of the table at ``uri``."""
    table = DeltaTable(uri, storage_options=dict(storage_options) if storage_options else None)
    metrics = table.optimize.compact(
        partition_filters=[(PARTITION_COLUMN, "in", list(days))], target_size=target_bytes
    )
    return int(metrics["numFilesRemoved"]), int(metrics["numFilesAdded"])


def main() -> int:
    request = json.load(sys.stdin)
    try:
        removed, added = compact_days(
            request["uri"], request["storage_options"], request["days"], request["target_bytes"]
        )
    except Exception as exc:  # any: the parent reports it, with its type
        print(f"{type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    print(json.dumps({"removed": removed, "added": added}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
