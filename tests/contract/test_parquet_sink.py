"""``ParquetSink``: exact rows back, the folder layout, what a failed, cancelled or killed
write leaves, and that readers of the table never see a file no commit added."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from adapters.parquet import LANDED_SCHEMA, ParquetSettings, ParquetSink
from core.errors import OwnershipLostError
from core.messages import Envelope, LandedRow, MessageKind
from services.common.table import landed_summary, read_landed

DAY1 = datetime(2026, 11, 21, 23, 59, 59, 999_999, tzinfo=UTC).timestamp()
DAY2 = datetime(2026, 11, 22, 0, 0, 0, 1, tzinfo=UTC).timestamp()


def row(n: int, partition: int = 3, received_at: float = DAY1, **kw: Any) -> LandedRow:
    envelope = Envelope(
        message_id=f"m{n}",
        project_id=f"proj{n % 2}",
        partition=partition,
        gateway_id="gw-1",
        sequence=2**40 + n,
        received_at=received_at,
        payload=json.dumps({"n": n, "text": "é" * (n % 5)}).encode(),
        kind=MessageKind.ANNOUNCE if n == 0 else MessageKind.DATA,
    )
    return LandedRow(
        envelope,
        generation=kw.get("generation", 7),
        handler_id="h/1",
        handled_at=DAY2,
        log_id="stream-1",
        position=1000 + n,
    )


def as_dicts(rows: list[LandedRow]) -> list[dict[str, Any]]:
    return [
        {
            "message_id": r.envelope.message_id,
            "project_id": r.envelope.project_id,
            "partition": r.envelope.partition,
            "generation": r.generation,
            "handler_id": r.handler_id,
            "gateway_id": r.envelope.gateway_id,
            "sequence": r.envelope.sequence,
            "received_at": datetime.fromtimestamp(r.envelope.received_at, UTC),
            "handled_at": datetime.fromtimestamp(r.handled_at, UTC),
            "kind": r.envelope.kind.value,
            "payload": r.envelope.payload.decode(),
            "log_id": r.log_id,
            "position": r.position,
        }
        for r in rows
    ]


def tree(data_dir: Path, pattern: str = "*") -> list[Path]:
    return sorted(p.relative_to(data_dir) for p in data_dir.rglob(pattern))


def read_back(data_dir: Path) -> list[dict[str, Any]]:
    table = ds.dataset(data_dir, format="parquet", partitioning="hive").to_table()
    return sorted(table.select(LANDED_SCHEMA.names).to_pylist(), key=lambda d: d["message_id"])


@pytest.mark.anyio
async def test_write_lands_exactly_the_rows_when_read_back(tmp_path: Path) -> None:
    rows = [row(n) for n in range(5)] + [row(5, partition=12), row(6, received_at=DAY2)]
    sink = ParquetSink(ParquetSettings(data_dir=tmp_path))
    async with sink:
        await sink.write(rows[:3])
        await sink.write(rows[3:])
        await sink.write([])
    assert read_back(tmp_path) == sorted(as_dicts(rows), key=lambda d: d["message_id"])
    for file in tree(tmp_path, "*.parquet"):
        assert pq.read_schema(tmp_path / file).remove_metadata() == LANDED_SCHEMA


@pytest.mark.anyio
async def test_one_file_per_date_and_write_holding_every_partition_sorted(tmp_path: Path) -> None:
    sink = ParquetSink(ParquetSettings(data_dir=tmp_path))
    day1 = [row(7, partition=12), row(2), row(1), row(3, partition=12)]
    first = await sink.write([*day1, row(4, received_at=DAY2)])
    second = await sink.write([row(5)])
    assert [(f.path.split("/")[0], f.rows) for f in first] == [
        ("date=2026-11-21", 4),
        ("date=2026-11-22", 1),
    ]
    assert [(f.path.split("/")[0], f.rows) for f in second] == [("date=2026-11-21", 1)]
    files = tree(tmp_path, "*.parquet")
    assert sorted(f.path for f in [*first, *second]) == sorted(p.as_posix() for p in files)
    assert [str(p.parent) for p in files] == [
        "date=2026-11-21",
        "date=2026-11-21",
        "date=2026-11-22",
    ]
    assert len(tree(tmp_path)) == 3 + 2  # files, date folders
    names = [p.name for p in files]
    assert all(n.startswith("h_1-") and len(n) == len("h_1-") + 32 + 8 for n in names)
    big = max(files, key=lambda f: pq.read_metadata(tmp_path / f).num_rows)
    stored = pq.read_table(tmp_path / big).to_pylist()
    assert [(r["partition"], r["project_id"], r["sequence"]) for r in stored] == sorted(
        (r.envelope.partition, r.envelope.project_id, r.envelope.sequence) for r in day1
    )
    table = ds.dataset(tmp_path, format="parquet", partitioning="hive").to_table()
    assert table.schema.field("partition").type == pa.int32()


@pytest.mark.anyio
async def test_nothing_is_stored_when_ownership_is_lost_after_encoding(tmp_path: Path) -> None:
    sink = ParquetSink(ParquetSettings(data_dir=tmp_path))
    asked: list[bool] = []

    def lost() -> bool:
        asked.append(True)
        return False

    with pytest.raises(OwnershipLostError, match="2 rows not written"):
        await sink.write([row(1), row(2)], still_valid=lost)
    assert asked == [True]
    assert tree(tmp_path, "*.*") == []


@pytest.mark.anyio
async def test_a_cancelled_write_stores_nothing_even_after_its_thread_finishes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sink = ParquetSink(ParquetSettings(data_dir=tmp_path))
    entered, release, finished = threading.Event(), threading.Event(), threading.Event()
    real = pq.write_table

    def stalled(table: pa.Table, where: Any, **kw: Any) -> None:
        entered.set()
        release.wait(10)  # a stalled encoder (a paused process)
        try:
            real(table, where, **kw)
        finally:
            finished.set()

    monkeypatch.setattr(pq, "write_table", stalled)
    with anyio.move_on_after(0.2) as scope:
        await sink.write([row(1)])
    assert scope.cancelled_caught and entered.is_set()
    release.set()
    assert await anyio.to_thread.run_sync(finished.wait, 10)
    # The abandoned thread sees the cancellation at the ownership check, which follows the
    # encoding in the same thread: nothing may be stored after it.
    await anyio.to_thread.run_sync(lambda: None)
    assert tree(tmp_path, "*.parquet") == []


def thread_finished(sink: ParquetSink, monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """Set once a write's worker thread has ended, whatever became of its caller."""
    finished = threading.Event()
    real_write_sync = sink._write_sync

    def watched(*args: Any) -> Any:
        try:
            return real_write_sync(*args)
        finally:
            finished.set()

    monkeypatch.setattr(sink, "_write_sync", watched)
    return finished


@pytest.mark.anyio
async def test_a_write_cancelled_while_its_file_goes_to_disk_leaves_no_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Past the ownership check, storing: a handler SIGSTOPped here, whose lease ran out,
    # is cancelled when it wakes; its thread finishes the file and must remove it.
    sink = ParquetSink(ParquetSettings(data_dir=tmp_path))
    storing, release = threading.Event(), threading.Event()
    finished = thread_finished(sink, monkeypatch)
    real_fsync = os.fsync

    def slow_disk(fd: int) -> None:
        if not Path(f"/proc/self/fd/{fd}").is_dir():
            storing.set()
            release.wait(10)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", slow_disk)
    with anyio.CancelScope() as scope:
        async with anyio.create_task_group() as tg:
            tg.start_soon(sink.write, [row(1), row(2)])
            assert await anyio.to_thread.run_sync(storing.wait, 10)
            scope.cancel()
    release.set()
    assert await anyio.to_thread.run_sync(finished.wait, 10)
    assert tree(tmp_path, "*.parquet") == []


@pytest.mark.anyio
async def test_a_write_cancelled_as_it_hands_its_files_over_leaves_no_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The last ownership check passes and the caller is cancelled right then (a handler
    # resumed from a pause whose lease ran out meanwhile): the files are stored, and either
    # the thread sees the cancellation before it hands them over and removes them, or the
    # cancelled call gets them handed over and removes them; never nobody.
    sink = ParquetSink(ParquetSettings(data_dir=tmp_path))
    finished = thread_finished(sink, monkeypatch)
    checks = 0
    with anyio.CancelScope() as scope:

        def owned_until_the_last_check() -> bool:
            nonlocal checks
            checks += 1
            if checks == 2:  # the check after storing: true, and the caller goes
                scope.cancel()
            return True

        await sink.write([row(1), row(2)], still_valid=owned_until_the_last_check)
    assert scope.cancelled_caught and checks == 2
    assert await anyio.to_thread.run_sync(finished.wait, 10)
    assert tree(tmp_path, "*.parquet") == []


@pytest.mark.anyio
async def test_a_write_the_disk_fails_halfway_leaves_no_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sink = ParquetSink(ParquetSettings(data_dir=tmp_path))
    kept = await sink.write([row(1)])
    real_fsync = os.fsync

    def full_disk(fd: int) -> None:
        if Path(f"/proc/self/fd/{fd}").is_dir():
            real_fsync(fd)
            return
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full_disk)
    with pytest.raises(OSError, match="No space"):
        await sink.write([row(2), row(3, received_at=DAY2)])
    assert [p.as_posix() for p in tree(tmp_path, "*.parquet")] == [f.path for f in kept]


def test_a_killed_writer_leaves_the_table_whole(tmp_path: Path) -> None:
    # The handler's own path, in a process SIGKILLed at a random point: files it stored but
    # did not commit (whole or cut short) are on disk, and the table has exactly the rows
    # of its commits.
    script = textwrap.dedent(
        f"""
        import anyio, sys
        sys.path.insert(0, {str(Path.cwd())!r})
        from tests.contract.test_parquet_sink import row
        from services.common.landing_zone import open_landing_zone
        from core.table import log_key
        async def main():
            async with open_landing_zone({str(tmp_path)!r}) as zone:
                n = 0
                while True:
                    files = await zone.sink.write([row(i) for i in range(n, n + 2000)])
                    await zone.table.refresh()
                    await zone.table.commit(files, {{log_key("stream-1", 3): n + 1}})
                    n += 2000
        anyio.run(main)
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", script])
    try:
        deadline = time.monotonic() + 60
        while len(tree(tmp_path, "_delta_log/*.json")) < 4:  # poll the disk for commits
            assert time.monotonic() < deadline and proc.poll() is None, "writer committed nothing"
            time.sleep(0.05)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    summary = landed_summary(tmp_path)
    assert summary.rows == 2000 * len(summary.files) > 0
    table = read_landed(tmp_path, columns=["message_id"])
    assert table.num_rows == summary.rows
    assert len(set(table.column("message_id").to_pylist())) == summary.rows


@pytest.mark.anyio
async def test_discard_removes_exactly_the_files_named(tmp_path: Path) -> None:
    sink = ParquetSink(ParquetSettings(data_dir=tmp_path))
    kept = await sink.write([row(1), row(2, received_at=DAY2)])
    dropped = await sink.write([row(3), row(4, received_at=DAY2)])
    await sink.discard(dropped)
    await sink.discard(dropped)  # gone already: fine
    assert sorted(p.as_posix() for p in tree(tmp_path, "*.parquet")) == sorted(f.path for f in kept)
    assert sorted(r["message_id"] for r in read_back(tmp_path)) == ["m1", "m2"]
