"""Compaction: closed days merged and swapped in one commit each, the audit unchanged,
today untouched, unreferenced files deleted after the retention (committed ones never), a
racing compactor losing cleanly, and readers seeing every row exactly once throughout.

The zone: the planted rows (tests/spark/_landing.py, all received on 2026-11-21) in 25
files of 500 rows (the last 1), and a series on 2026-11-22, "today", in 4 files.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from dataclasses import replace
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pyarrow.parquet as pq
import pytest

from adapters.parquet import (
    LocalLandingLog,
    LocalZoneFiles,
    ParquetSettings,
    ParquetSink,
    to_table,
)
from adapters.spark import AuditResult, SparkAnalytics
from core.table import LandedFile, TableState
from services.cli._compact import (
    Compaction,
    DayCompaction,
    compact,
    compact_day,
    files_by_day,
)
from services.common.table import LandingTable, committed_state, read_table
from tests.spark._landing import (
    Planted,
    commit,
    committed,
    land,
    series,
    write_uncommitted,
)

CLOSED = "2026-11-21"
TODAY = date(2026, 11, 22)
TODAY_ROWS = 901  # the announcement and 900 sequences
TARGET = 5000
HOUR = 3600.0


@pytest.fixture
def zone(tmp_path: Path, planted: Planted) -> Path:
    land(tmp_path, planted.rows, batch=500)
    start = datetime(2026, 11, 22, 1, tzinfo=UTC).timestamp()
    land(tmp_path, series("gw-t", "proj-t", start, TODAY_ROWS - 1), batch=300)
    return tmp_path


def run_compact(data_dir: Path, **options: Any) -> Compaction:
    async def go() -> Compaction:
        return await compact(data_dir, **{"today": TODAY, "target_rows": TARGET, **options})

    return anyio.run(go)


def audit_of(analytics: SparkAnalytics, data_dir: Path) -> AuditResult:
    return analytics.audit(data_dir, committed(data_dir), drained=True)


def same_audit(a: AuditResult, b: AuditResult) -> None:
    for name in ("accepted", "landed", "lost", "duplicated", "series", "announcements"):
        assert getattr(a, name) == getattr(b, name), name
    assert a.lost_ranges == b.lost_ranges
    assert a.worst == b.worst


def on_day(state: TableState, day: str) -> dict[str, LandedFile]:
    return {p: f for p, f in state.files.items() if p.startswith(f"date={day}/")}


def on_disk(data_dir: Path) -> set[str]:
    """Every file in a date folder, hidden ones included."""
    return {p.relative_to(data_dir).as_posix() for p in data_dir.glob("date=*/*")}


def age(path: Path, seconds: float) -> None:
    then = time.time() - seconds
    os.utime(path, (then, then))


def message_ids(data_dir: Path, state: TableState) -> Counter[str]:
    ids: Counter[str] = Counter()
    for path in state.files:
        table = pq.read_table(data_dir / path, columns=["message_id"])
        ids.update(table.column("message_id").to_pylist())
    return ids


def test_compaction_swaps_closed_days_and_keeps_the_audit(
    analytics: SparkAnalytics, zone: Path, planted: Planted
) -> None:
    # What readers must never see, and what must go once old enough.
    [old_orphan] = write_uncommitted(zone, planted.rows[:40])
    [young_orphan] = write_uncommitted(zone, planted.rows[40:80])
    torn = zone / f"date={CLOSED}" / ".h9-0123456789abcdef.tmp"
    torn.write_bytes(b"PAR1 torn")
    age(zone / old_orphan.path, 2 * HOUR)
    age(torn, 2 * HOUR)
    before = read_table(zone)
    today_before = {p: (zone / p).stat().st_mtime_ns for p in on_day(before, "2026-11-22")}
    audit_before = audit_of(analytics, zone)
    assert len(on_day(before, CLOSED)) == 25 and len(today_before) == 4

    result = run_compact(zone)

    rows = len(planted.rows)
    assert result.ok
    assert result.days == (DayCompaction(CLOSED, "compacted", 25, 3, rows),)
    assert (result.version_before, result.version_after) == (before.version, before.version + 1)
    after = read_table(zone)
    merged = on_day(after, CLOSED)
    assert len(merged) == 3 and not merged.keys() & before.files.keys()
    assert sorted(f.rows for f in merged.values()) == [rows - 2 * TARGET, TARGET, TARGET]
    for path, landed in merged.items():
        table = pq.read_table(zone / path)
        assert table.num_rows == landed.rows <= TARGET
        keys = [("partition", "ascending"), ("project_id", "ascending"), ("sequence", "ascending")]
        assert table.sort_by(keys).equals(table)
    # today untouched: the same files, not even re-stamped
    assert {p: (zone / p).stat().st_mtime_ns for p in on_day(after, "2026-11-22")} == today_before
    assert after.rows() == before.rows() == rows + TODAY_ROWS
    same_audit(audit_of(analytics, zone), audit_before)
    # The old orphan and the torn file are gone; the young orphan stays, and so do the files
    # compacted away (re-stamped at the swap: readers on them have an hour to finish).
    assert result.garbage is not None
    assert set(result.garbage.deleted) == {old_orphan.path, torn.relative_to(zone).as_posix()}
    assert on_disk(zone) == {*after.files, *on_day(before, CLOSED), young_orphan.path}

    # A day later, as it were: everything the table does not name goes, nothing it names.
    again = run_compact(zone, retention=0)
    assert again.days == (DayCompaction(CLOSED, "skipped", 3, 3, rows, again.days[0].note),)
    assert again.version_after == after.version
    assert again.garbage is not None and len(again.garbage.deleted) == 25 + 1
    assert on_disk(zone) == set(after.files)
    same_audit(audit_of(analytics, zone), audit_before)


def test_include_today(zone: Path) -> None:
    result = run_compact(zone, include_today=True)
    assert [(d.date, d.status, d.files_after) for d in result.days] == [
        (CLOSED, "compacted", 3),
        ("2026-11-22", "compacted", 1),
    ]


def test_rows_that_do_not_add_up_are_not_swapped(tmp_path: Path, planted: Planted) -> None:
    files = write_uncommitted(tmp_path, planted.rows[:1000], batch=250)
    commit(tmp_path, [*files[:3], replace(files[3], rows=files[3].rows - 1)])
    before = read_table(tmp_path)
    result = run_compact(tmp_path, retention=0)
    assert not result.ok
    [day] = result.days
    assert day.status == "mismatch" and files[3].path in day.note
    assert result.garbage is None  # nothing deleted either
    assert read_table(tmp_path) == before
    assert on_disk(tmp_path) == {f.path for f in files}


@pytest.mark.anyio
async def test_a_racing_compactor_loses_cleanly(zone: Path) -> None:
    """A compactor that read the table before another swapped the same day: its commit is
    refused, its new files deleted, the table as the winner left it."""
    async with LocalLandingLog(zone) as landing_log:
        slow = LandingTable(landing_log, "slow-compactor")
        seen = await slow.refresh()
        files = files_by_day(seen)[CLOSED]
        won = await compact(zone, today=TODAY, target_rows=TARGET)
        assert [d.status for d in won.days] == ["compacted"]
        winner = await committed_state(zone)
        disk = on_disk(zone)
        sink = ParquetSink(ParquetSettings(data_dir=zone))
        lost = await compact_day(
            slow, sink, LocalZoneFiles(zone), CLOSED, files, target_rows=TARGET
        )
    assert lost == DayCompaction(CLOSED, "raced", 25, 25, seen.rows() - TODAY_ROWS, lost.note)
    assert "another compactor" in lost.note
    assert on_disk(zone) == disk  # its merged files are deleted
    assert await committed_state(zone) == winner


@pytest.mark.anyio
async def test_two_compactors_at_once(zone: Path) -> None:
    before = await committed_state(zone)
    results: list[Compaction] = []

    async def one() -> None:
        results.append(await compact(zone, today=TODAY, target_rows=TARGET))

    async with anyio.create_task_group() as tg:
        tg.start_soon(one)
        tg.start_soon(one)
    statuses = sorted(r.days[0].status for r in results)
    assert statuses[0] == "compacted" and statuses[1] in {"raced", "skipped"}
    after = await committed_state(zone)
    assert len(on_day(after, CLOSED)) == 3
    ids = await anyio.to_thread.run_sync(message_ids, zone, after)
    assert ids == await anyio.to_thread.run_sync(message_ids, zone, before)
    # the loser left nothing behind: the table, and the files compacted away (kept an hour)
    assert on_disk(zone) == {*after.files, *on_day(before, CLOSED)}


@pytest.mark.anyio
async def test_readers_see_every_row_exactly_once_during_compaction(zone: Path) -> None:
    """A reader resolving the table and reading its files over and over while compaction
    runs (small bins: many steps) finds the same rows each time, before, during and after
    the swap."""
    expected = await anyio.to_thread.run_sync(message_ids, zone, await committed_state(zone))
    total = sum(expected.values())
    versions: list[int] = []
    finished = anyio.Event()

    async def reader() -> None:
        while True:
            last = finished.is_set()
            state = await committed_state(zone)
            assert state.rows() == total
            assert await anyio.to_thread.run_sync(message_ids, zone, state) == expected
            versions.append(state.version)
            if last:
                return

    async with anyio.create_task_group() as tg:
        tg.start_soon(reader)
        result = await compact(zone, today=TODAY, target_rows=1000)
        finished.set()
    assert result.days[0].status == "compacted"
    assert versions[0] == result.version_before
    assert versions[-1] == result.version_after == result.version_before + 1


@pytest.mark.anyio
async def test_write_table_refuses_another_schema_or_day(tmp_path: Path, planted: Planted) -> None:
    """The sink's whole-table write (compaction's) lands the landed schema only, in a
    ``date=`` folder only."""
    sink = ParquetSink(ParquetSettings(data_dir=tmp_path))
    rows = to_table(planted.rows[:100])
    with pytest.raises(ValueError, match="not the landed schema"):
        await sink.write_table(CLOSED, rows.drop_columns(["payload"]), writer="compact")
    with pytest.raises(ValueError, match="does not match format"):
        await sink.write_table("../../etc", rows, writer="compact")
    written = await sink.write_table(CLOSED, rows, writer="compact")
    assert written.path.startswith(f"date={CLOSED}/compact-")
    assert pq.read_table(tmp_path / written.path).equals(rows)
