"""Generated landing data with planted gaps, duplicates, a refused range and known latencies.

Written as a handler lands a batch: the zone's real ``ParquetSink`` writes the files (so the
layout and schema are the handler's), one ``DeltaLandedTable`` commit adds them and sets
each log's app transaction (so readers read a real Delta table: only the files its newest
version names); plus a gateway ledger in the format ``adapters.spark`` documents. Every
expected count in the tests is derived by hand in ``PLANTED`` below, not recomputed by the
code under test.
"""

from __future__ import annotations

import itertools
import json
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

import anyio

from adapters.parquet import ParquetSettings, ParquetSink
from adapters.s3 import S3Settings
from core.messages import Envelope, LandedRow, MessageKind
from core.partitioning import partition_for
from core.table import LandedFile, LogKey, log_key
from services.common.landing_zone import open_landing_zone
from services.common.table import landed_summary

__all__ = [
    "BASE",
    "CHANGE_AT",
    "PARTITIONS",
    "LedgerRange",
    "Planted",
    "build_planted",
    "commit",
    "committed",
    "delivered",
    "empty_table",
    "gateways_projects",
    "land",
    "latency_ms_of",
    "orphan_rows",
    "owner",
    "skewed_rows",
    "write_ledger",
    "write_uncommitted",
]

BASE = datetime(2026, 11, 21, 12, 0, tzinfo=UTC).timestamp()
PARTITIONS = 8
SERIES_LENGTH = 1000
CHANGE_AT = BASE + 50.0  # generation 1 -> 2 (by handled_at)
GATEWAYS = ("gw-a", "gw-b")
PROJECTS = tuple(f"proj-{k}" for k in range(6))
LOG_ID = "tests-stream"  # the broker log every generated row was delivered from


def gateways_projects() -> list[tuple[str, str]]:
    return [(g, p) for g in GATEWAYS for p in PROJECTS]


def received_at(series_index: int, sequence: int) -> float:
    """Monotonic in the sequence, 0.1 s apart: sequence s of any series at BASE + s/10 (+ i ms)."""
    return BASE + sequence * 0.1 + series_index * 0.001


def latency_ms_of(global_index: int) -> float:
    """1..1000 ms; every 1000 consecutive rows take each value once (7919 is prime)."""
    return float((global_index * 7919) % 1000 + 1)


def owner(partition: int, handled_at: float) -> tuple[int, str]:
    """(generation, handler): g1 h1 = 0-3, h2 = 4-7; g2 moves 3 and 7 to h3."""
    if handled_at < CHANGE_AT:
        return 1, "h1" if partition < 4 else "h2"
    if partition in {3, 7}:
        return 2, "h3"
    return 2, "h1" if partition < 4 else "h2"


@dataclass(frozen=True)
class LedgerRange:
    gateway_id: str
    project_id: str
    first: int
    last: int
    outcome: str
    decided_at: float


@dataclass
class Planted:
    rows: list[LandedRow]
    ledger: list[LedgerRange]


# (gateway, project) -> what is planted; the tests' expected numbers follow from this table.
MISSING = {
    ("gw-a", "proj-0"): {5, 6},
    ("gw-a", "proj-1"): {500},
    ("gw-a", "proj-4"): set(range(301, 306)),  # refused by a 503: never accepted
    ("gw-b", "proj-3"): {950, *range(991, 1001)},  # 950 and the tail 991..1000
}
EXTRA_COPIES = {("gw-a", "proj-0"): {7: 2}, ("gw-b", "proj-2"): {1: 1, 2: 1, 3: 1}}
UNACKNOWLEDGED = {("gw-b", "proj-5"): range(1001, 1004)}  # landed, but the gateway said 503


def build_planted() -> Planted:
    rows: list[LandedRow] = []
    ledger: list[LedgerRange] = []
    index = 0

    def add(gateway: str, project: str, series: int, sequence: int, copy: int) -> None:
        nonlocal index
        partition = partition_for(project, PARTITIONS)
        received = received_at(series, sequence)
        handled = received + latency_ms_of(index) / 1000 + copy * 2.0  # a redelivery is later
        generation, handler = owner(partition, handled)
        kind = MessageKind.ANNOUNCE if sequence == 0 else MessageKind.DATA
        envelope = Envelope(
            message_id=f"{gateway}-{project}-{sequence}",
            project_id=project,
            partition=partition,
            gateway_id=gateway,
            sequence=sequence,
            received_at=received,
            payload=b'{"v":%d}' % sequence,
            kind=kind,
        )
        rows.append(LandedRow(envelope, generation, handler, handled))
        if kind is MessageKind.DATA:
            index += 1

    for series, (gateway, project) in enumerate(gateways_projects()):
        key = (gateway, project)
        add(gateway, project, series, 0, 0)  # the announcement
        missing = MISSING.get(key, set())
        extra = EXTRA_COPIES.get(key, {})
        tail = UNACKNOWLEDGED.get(key, range(0))
        for sequence in [*range(1, SERIES_LENGTH + 1), *tail]:
            if sequence in missing:
                continue
            for copy in range(1 + extra.get(sequence, 0)):
                add(gateway, project, series, sequence, copy)
        # The ledger: one request per 10 sequences, decided 5 ms after its last was received.
        for first in range(1, SERIES_LENGTH + 1, 10):
            chunks = [(first, first + 9, "accepted")]
            if key == ("gw-a", "proj-4") and first == 301:
                chunks = [(301, 305, "refused"), (306, 310, "accepted")]
            for lo, hi, outcome in chunks:
                decided = received_at(series, hi) + 0.005
                ledger.append(LedgerRange(gateway, project, lo, hi, outcome, decided))
        if tail:
            decided = received_at(series, tail[-1]) + 0.005
            ledger.append(LedgerRange(gateway, project, tail[0], tail[-1], "refused", decided))
    return Planted(delivered(rows), ledger)


def delivered(rows: Iterable[LandedRow]) -> list[LandedRow]:
    """``rows`` as a broker delivered them, in this order: from ``LOG_ID``, each at the next
    position of its partition's log."""
    positions: defaultdict[int, itertools.count[int]] = defaultdict(lambda: itertools.count(1))
    return [replace(r, log_id=LOG_ID, position=next(positions[r.envelope.partition])) for r in rows]


def _logs(rows: Iterable[LandedRow]) -> set[LogKey]:
    return {log_key(r.log_id, r.envelope.partition) for r in rows}


def land(
    data_dir: Path | str,
    rows: Sequence[LandedRow],
    batch: int = 2000,
    *,
    s3: S3Settings | None = None,
) -> list[LandedFile]:
    """Land ``rows`` as a handler does, ``batch`` rows at a time: the zone's sink writes the
    files, then one commit on the newest version adds them and sets the app transaction of
    every log the batch holds rows of (the token: that commit's version). Returns the
    files. ``data_dir`` may be ``s3://bucket/prefix`` (on the store ``s3`` reaches)."""

    async def land_all() -> list[LandedFile]:
        written: list[LandedFile] = []
        async with open_landing_zone(data_dir, s3=s3) as zone:
            for start in range(0, len(rows), batch):
                chunk = rows[start : start + batch]
                token = await zone.table.refresh() + 1
                files = await zone.sink.write(chunk)
                await zone.table.commit(files, dict.fromkeys(_logs(chunk), token))
                written.extend(files)
        return written

    return anyio.run(land_all)


def empty_table(data_dir: Path) -> None:
    """The zone's Delta table, created as a handler's first ``refresh`` does, with no rows."""

    async def create() -> None:
        async with open_landing_zone(data_dir) as zone:
            await zone.table.refresh()

    anyio.run(create)


def write_uncommitted(
    data_dir: Path, rows: Sequence[LandedRow], batch: int = 2000
) -> list[LandedFile]:
    """Write ``rows`` with the real sink and commit nothing: what a writer that crashed
    before its commit leaves (files no reader may see)."""
    sink = ParquetSink(ParquetSettings(data_dir=data_dir))

    async def write_all() -> list[LandedFile]:
        written: list[LandedFile] = []
        async with sink:
            for start in range(0, len(rows), batch):
                written.extend(await sink.write(rows[start : start + batch]))
        return written

    return anyio.run(write_all)


def commit(data_dir: Path, files: Sequence[LandedFile]) -> None:
    """One commit adding ``files`` (already written) to the zone's table, setting no app
    transaction."""

    async def add() -> None:
        async with open_landing_zone(data_dir) as zone:
            await zone.table.refresh()
            await zone.table.commit(files, {})

    anyio.run(add)


def committed(data_dir: Path) -> list[Path]:
    """The data files of the table's newest version (absolute paths): what readers read."""
    return [data_dir.resolve() / path for path in landed_summary(data_dir).files]


def orphan_rows(planted: Planted) -> list[LandedRow]:
    """A crashed writer's rows: gw-a/proj-3 1..50 again (50 duplicates, were they read) and
    gw-a/proj-1 500, planted as lost (it would hide that loss)."""
    series = [r for r in planted.rows if r.envelope.project_id in {"proj-1", "proj-3"}]
    again = [
        r
        for r in series
        if (r.envelope.gateway_id, r.envelope.project_id) == ("gw-a", "proj-3")
        and 1 <= r.envelope.sequence <= 50
    ]
    before = next(
        r
        for r in series
        if (r.envelope.gateway_id, r.envelope.project_id, r.envelope.sequence)
        == ("gw-a", "proj-1", 499)
    )
    lost = replace(
        before,
        envelope=replace(before.envelope, message_id="gw-a-proj-1-500", sequence=500),
        handler_id="h9",
    )
    return [*again, lost]


def write_ledger(ledger_dir: Path, ranges: Iterable[LedgerRange]) -> None:
    """One JSON Lines file per gateway, plus a torn last line (a crash mid-append)."""
    ledger_dir.mkdir(parents=True, exist_ok=True)
    by_gateway: dict[str, list[str]] = {}
    for r in ranges:
        line = json.dumps(
            {
                "v": 1,
                "gateway_id": r.gateway_id,
                "project_id": r.project_id,
                "first_sequence": r.first,
                "last_sequence": r.last,
                "outcome": r.outcome,
                "received_at": r.decided_at - 0.005,
                "decided_at": r.decided_at,
            }
        )
        by_gateway.setdefault(r.gateway_id, []).append(line)
    for gateway, lines in by_gateway.items():
        text = "\n".join(lines) + '\n{"v": 1, "gateway_id": "' + gateway + '", "proj'
        (ledger_dir / f"{gateway}.jsonl").write_text(text, encoding="utf-8")


def skewed_rows(partitions: int, loads: Sequence[int]) -> list[LandedRow]:
    """``loads[p]`` data rows on partition ``p`` (one project per partition)."""
    projects: dict[int, str] = {}
    n = 0
    while len(projects) < partitions:
        candidate = f"skew-{n}"
        projects.setdefault(partition_for(candidate, partitions), candidate)
        n += 1
    rows = []
    for partition, load in enumerate(loads):
        project = projects[partition]
        for sequence in range(1, load + 1):
            received = BASE + sequence * 0.01
            envelope = Envelope(
                message_id=f"{project}-{sequence}",
                project_id=project,
                partition=partition,
                gateway_id="gw-s",
                sequence=sequence,
                received_at=received,
                payload=b"{}",
            )
            rows.append(LandedRow(envelope, 1, "h1", received + 0.01))
    return delivered(rows)
