"""Stops a process group the moment one of its files is being written.

``python -m tests.faults._stopper ZONE PREFIX PGID WITHIN`` watches the ``date=*`` folders
of the landing zone ZONE for a new ``PREFIX*.parquet`` file (a batch being stored, whose
Delta commit follows within milliseconds) and SIGSTOPs the group PGID at once. After WITHIN
seconds the group is stopped wherever it is. Prints one JSON line: ``{"stopped_at": wall
clock, "file": path or null}``.

A process of its own: a watcher thread inside the test process shares the interpreter lock
with the load generator and the zone reader, and on a loaded machine it saw no write in
flight for a minute, while a write lasts a few milliseconds.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

POLL = 0.001  # another process's files: there is no event to await
FOLDERS_EVERY = 0.2  # new date=* folders are looked for this often


def stop_mid_write(zone: Path, prefix: str, pgid: int, within: float) -> tuple[float, str | None]:
    deadline = time.monotonic() + within
    folders: list[Path] = []
    listed = 0.0
    known: set[str] | None = None  # the files there before: not being written
    while time.monotonic() < deadline:
        if time.monotonic() - listed > FOLDERS_EVERY:
            folders, listed = sorted(zone.glob("date=*")), time.monotonic()
        seen: set[str] = set()
        for folder in folders:
            with os.scandir(folder) as entries:
                for entry in entries:
                    if not (entry.name.startswith(prefix) and entry.name.endswith(".parquet")):
                        continue
                    if known is not None and entry.path not in known:
                        stopped_at = time.time()
                        os.killpg(pgid, signal.SIGSTOP)
                        return stopped_at, entry.path
                    seen.add(entry.path)
        known = seen if known is None else known | seen
        time.sleep(POLL)
    stopped_at = time.time()
    os.killpg(pgid, signal.SIGSTOP)
    return stopped_at, None


def main(argv: list[str]) -> int:
    zone, prefix, pgid, within = Path(argv[0]), argv[1], int(argv[2]), float(argv[3])
    stopped_at, file = stop_mid_write(zone, prefix, pgid, within)
    print(json.dumps({"stopped_at": stopped_at, "file": file}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
