"""``shoal analytics compact`` and ``shoal analytics vacuum`` on a local Delta table: what
they merge and delete, their ``--json``, and their refusals (exit 2) of a zone that is
missing or holds no Delta table, which they never create. And the table's line in
``shoal status``, from the section a keeper's round puts in the status document."""

from __future__ import annotations

import io
import json
import os
import re
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from itertools import count
from pathlib import Path
from typing import Any

import anyio
import pyarrow as pa
from deltalake import DeltaTable
from rich.console import Console
from typer.testing import CliRunner, Result

from adapters.delta import TableSettings
from core.messages import Envelope, LandedRow
from services.cli._status import print_status
from services.cli.main import app
from services.common.landing_zone import open_landing_zone
from services.common.table import read_landed
from services.common.upkeep import TableKeeper, no_table_status, utc_day

# With no handler writing: every unnamed file, whatever its age.
AT_ONCE = ("--retention-hours", "0", "--allow-short-retention")
CLOSED_DAYS = ("2026-11-20", "2026-11-21")
EXIT_USAGE = 2

_positions = count()


def _rows(n: int, day: str | None) -> list[LandedRow]:
    received = (
        time.time()
        if day is None
        else datetime.fromisoformat(day).replace(hour=12, tzinfo=UTC).timestamp()
    )
    rows = []
    for position in [next(_positions) for _ in range(n)]:
        envelope = Envelope(f"m{position}", "p", 0, "gw", position + 1, received, b"{}")
        rows.append(LandedRow(envelope, 1, "h1", received, "L", position))
    return rows


def _land(zone_dir: Path, commits: dict[str | None, int]) -> None:
    """For each day (None: today) that many handler commits of 3 rows each."""

    async def land() -> None:
        async with open_landing_zone(zone_dir) as zone:
            for day, times in commits.items():
                for _ in range(times):
                    files = await zone.sink.write(_rows(3, day))
                    version = await zone.table.refresh()
                    await zone.table.commit(files, {"L#0": version + 1})

    anyio.run(land)


def _orphan(zone_dir: Path, age_hours: float) -> str:
    """A file written for a commit that never came, ``age_hours`` old: its path."""

    async def write() -> str:
        async with open_landing_zone(zone_dir) as zone:
            (written,) = await zone.sink.write(_rows(1, CLOSED_DAYS[0]))
            return written.path

    path = anyio.run(write)
    then = time.time() - age_hours * 3600
    os.utime(zone_dir / path, (then, then))
    return path


def _files_by_day(zone_dir: Path) -> dict[str, int]:
    actions = pa.table(DeltaTable(str(zone_dir)).get_add_actions(flatten=True))
    days = actions.column("partition.date").to_pylist()
    return {day: days.count(day) for day in sorted(set(days))}


def _ids(zone_dir: Path) -> list[str]:
    return sorted(str(m) for m in read_landed(zone_dir, columns=["message_id"])["message_id"])


def _run(*args: str, env: Mapping[str, str] | None = None) -> Result:
    return CliRunner().invoke(app, ["analytics", *args], env=env)


def _json(result: Result) -> Any:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_compact_merges_the_closed_days_and_leaves_today(tmp_path: Path) -> None:
    zone = tmp_path / "zone"
    _land(zone, {CLOSED_DAYS[0]: 4, CLOSED_DAYS[1]: 1, None: 3})
    ids = _ids(zone)
    today = utc_day(time.time())

    report = _json(_run("compact", str(zone), "--json"))

    assert _files_by_day(zone) == {CLOSED_DAYS[0]: 1, CLOSED_DAYS[1]: 1, today: 3}
    assert _ids(zone) == ids
    assert report == {
        "location": str(zone.absolute()),
        "today": today,
        "include_today": False,
        "version_before": 8,
        "version_after": 9,
        "files_before": 8,
        "files_after": 5,
        "rows_before": 24,
        "rows_after": 24,
        "dates": [{"date": CLOSED_DAYS[0], "files_before": 4, "small_before": 4, "files_after": 1}],
        "files_removed": 4,
        "files_added": 1,
        "log_files_removed": 0,  # every commit is younger than the log retention
    }

    again = _run("compact", str(zone))
    assert again.exit_code == 0, again.output
    assert "nothing to compact: no day before today holds two small files" in again.stdout
    assert DeltaTable(str(zone)).version() == 9

    today_too = _json(_run("compact", str(zone), "--include-today", "--json"))
    assert [d["date"] for d in today_too["dates"]] == [today]
    assert _files_by_day(zone) == {CLOSED_DAYS[0]: 1, CLOSED_DAYS[1]: 1, today: 1}
    assert _ids(zone) == ids


def test_compact_prints_what_it_merged(tmp_path: Path) -> None:
    zone = tmp_path / "zone"
    _land(zone, {CLOSED_DAYS[0]: 3})

    result = _run("compact", str(zone))

    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == f"compaction of {zone}: table version 3 -> 4, 3 -> 1 files"
    assert lines[2].split() == [CLOSED_DAYS[0], "3", "3", "1"]
    assert "3 files rewritten into 1; 9 rows" in result.stdout
    assert "checkpoint at version 4: 0 log files removed" in result.stdout


def test_vacuum_deletes_unnamed_files_older_than_the_retention(tmp_path: Path) -> None:
    zone = tmp_path / "zone"
    _land(zone, {CLOSED_DAYS[0]: 2})
    committed = sorted(p.relative_to(zone).as_posix() for p in zone.glob("date=*/*.parquet"))
    old, young = _orphan(zone, age_hours=37), _orphan(zone, age_hours=0)
    ids = _ids(zone)

    listed = _json(_run("vacuum", str(zone), "--dry-run", "--json"))

    assert listed == {
        "location": str(zone),
        "retention_hours": 36.0,
        "dry_run": True,
        "files": [old],
    }
    assert (zone / old).exists()

    deleted = _run("vacuum", str(zone))

    assert deleted.exit_code == 0, deleted.output
    assert deleted.stdout.splitlines() == [
        f"vacuum of {zone}: deleted 1 file(s) no table version names, older than 36 h",
        f"  {old}",
    ]
    assert not (zone / old).exists() and (zone / young).exists()
    assert all((zone / path).exists() for path in committed)
    assert _ids(zone) == ids

    at_zero = _json(_run("vacuum", str(zone), *AT_ONCE, "--json"))
    assert at_zero["files"] == [young]


def test_vacuum_removes_what_compaction_merged_away(tmp_path: Path) -> None:
    zone = tmp_path / "zone"
    _land(zone, {CLOSED_DAYS[0]: 3})
    merged_away = sorted(p.relative_to(zone).as_posix() for p in zone.glob("date=*/*.parquet"))
    assert _run("compact", str(zone)).exit_code == 0

    report = _json(_run("vacuum", str(zone), *AT_ONCE, "--json"))

    assert report["files"] == merged_away
    assert len(list(zone.glob("date=*/*.parquet"))) == 1
    assert len(_ids(zone)) == 9


def test_a_vacuum_retention_a_paused_writer_could_outlast_is_refused(tmp_path: Path) -> None:
    """At or below the log retention (a writer paused that long could commit files the
    vacuum deleted), or not above a handler's write and lease: refused, nothing deleted;
    ``--allow-short-retention`` (no handler writing) takes any."""
    zone = tmp_path / "zone"
    _land(zone, {CLOSED_DAYS[0]: 2})
    orphan = _orphan(zone, age_hours=2)

    below_log = _run("vacuum", str(zone), "--retention-hours", "1")
    below_write = _run(
        "vacuum",
        str(zone),
        "--retention-hours",
        "0.005",
        env={"SHOAL_TABLE_LOG_RETENTION_HOURS": "0.001"},
    )

    assert below_log.exit_code == EXIT_USAGE
    assert "must be below SHOAL_TABLE_VACUUM_RETENTION_HOURS" in below_log.stderr
    assert below_write.exit_code == EXIT_USAGE
    assert "not above a handler's write timeout and lease (40 s)" in below_write.stderr
    assert (zone / orphan).exists(), "nothing deleted"

    opted_out = _run("vacuum", str(zone), "--retention-hours", "1", "--allow-short-retention")

    assert opted_out.exit_code == 0, opted_out.output
    assert not (zone / orphan).exists()


def test_the_tables_own_log_retention_bounds_a_vacuum(tmp_path: Path) -> None:
    """The table keeps the log retention it was made with: a vacuum retention the settings
    allow but the table's ``delta.logRetentionDuration`` does not is refused."""
    zone = tmp_path / "zone"
    _land(zone, {CLOSED_DAYS[0]: 2})  # made with the default: 30 h
    orphan = _orphan(zone, age_hours=20)

    refused = _run(
        "vacuum",
        str(zone),
        "--retention-hours",
        "10",
        env={"SHOAL_TABLE_LOG_RETENTION_HOURS": "1"},
    )

    assert refused.exit_code == EXIT_USAGE, refused.output
    assert "not above the table's log retention (30 h" in refused.stderr
    assert (zone / orphan).exists()


def test_a_missing_zone_is_refused(tmp_path: Path) -> None:
    for command in ("compact", "vacuum"):
        result = _run(command, str(tmp_path / "nowhere"))
        assert result.exit_code == EXIT_USAGE
        assert f"error: landing zone {tmp_path / 'nowhere'} does not exist" in result.stderr
    assert not (tmp_path / "nowhere").exists()


def test_a_folder_without_a_delta_table_is_refused_and_left_alone(tmp_path: Path) -> None:
    (tmp_path / "date=2026-11-20").mkdir()
    (tmp_path / "date=2026-11-20" / "x.parquet").write_bytes(b"PAR1")
    for command in ("compact", "vacuum"):
        result = _run(command, str(tmp_path))
        assert result.exit_code == EXIT_USAGE
        assert f"error: {tmp_path} holds no Delta table (no _delta_log)" in result.stderr
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["date=2026-11-20", "x.parquet"]


def test_a_file_or_a_bucketless_url_is_refused(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    result = _run("compact", str(tmp_path / "file"))
    assert result.exit_code == EXIT_USAGE
    assert "is not a directory" in result.stderr
    result = _run("vacuum", "s3:///prefix")
    assert result.exit_code == EXIT_USAGE
    assert "names no bucket" in result.stderr


# --- shoal status ------------------------------------------------------------------------


def _status_lines(table: dict[str, Any]) -> list[str]:
    document: dict[str, Any] = {"leader": None, "members": [], "partitions": [], "table": table}
    out = io.StringIO()
    print_status(Console(file=out, width=400, highlight=False), document, "http://leader")
    return [line for line in out.getvalue().splitlines() if line.startswith("table")]


def _round(zone_dir: Path) -> dict[str, Any]:
    """The ``table`` section after one round of a keeper over ``zone_dir``."""

    async def one_round() -> dict[str, Any]:
        keeper = TableKeeper.at(zone_dir, TableSettings())
        await keeper.round()
        return keeper.status()

    return anyio.run(one_round)


def test_status_shows_the_tables_files_log_and_last_compaction(tmp_path: Path) -> None:
    zone = tmp_path / "zone"
    _land(zone, {CLOSED_DAYS[0]: 3})
    table = _round(zone)
    log_files = len([p for p in (zone / "_delta_log").iterdir() if p.is_file()])

    (line,) = _status_lines(table)

    size = f"{table['bytes'] / 1024:.1f} KiB"  # a few KiB: three rows per file
    assert line.startswith(f"table · 1 files (1 small) · {size} · 9 rows · ")
    assert f" · log {log_files} files, " in line
    assert re.search(r" · last compaction [0-9:]+ UTC \(\d+ s ago\): 3 -> 1 files", line)
    assert " · last vacuum " in line and ": 0 files deleted" in line
    assert "FAILING" not in line


def test_status_says_when_the_upkeep_fails_or_is_off(tmp_path: Path) -> None:
    zone = tmp_path / "zone"
    _land(zone, {CLOSED_DAYS[0]: 1})
    (zone / "_delta_log" / f"{2:020}.json").write_text("not json\n")

    (failing,) = _status_lines(_round(zone))
    (off,) = _status_lines(no_table_status())

    assert failing.startswith("table · not read yet · no compaction yet · UPKEEP FAILING: ")
    assert "OSError: Delta table:" in failing
    assert off == "table: not kept up by this leader (no SHOAL_LEADER_DATA_DIR, or broadcast mode)"
