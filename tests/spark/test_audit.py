"""The audit's exact counts on planted data, and the in-flight vs lost rule.

Planted (tests/spark/_landing.py): 12 series (gw-a, gw-b x proj-0..5) of sequences
1..1000, each sequence s received at BASE + s/10 s (+ series ms), plus one announcement
(sequence 0) per series. Then:

- gw-a/proj-0: 5, 6 missing; 7 landed three times (+2 duplicates)
- gw-a/proj-1: 500 missing
- gw-a/proj-4: 301..305 missing: a request refused with 503 (never accepted)
- gw-b/proj-2: 1, 2, 3 landed twice (+3 duplicates)
- gw-b/proj-3: 950 missing, and the tail 991..1000 missing
- gw-b/proj-5: 1001..1003 landed although the gateway answered 503 (publish timed out)

The ledger holds one accepted range per 10 sequences (decided 5 ms after the range's last
receive), 301..305 of gw-a/proj-4 and 1001..1003 of gw-b/proj-5 refused.

The directory is a Delta table, and also holds what no reader may see: a torn ``.tmp``
file and a complete Parquet file the sink wrote but no commit added (``orphan_rows``: 50
more copies of gw-a/proj-3 and the "lost" gw-a/proj-1 500). Every count below holds only
if both are skipped.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from adapters.spark import AuditResult, LandingDirError, LostRange, SparkAnalytics, nines
from core.messages import MessageKind
from tests.spark._landing import (
    BASE,
    Planted,
    build_planted,
    commit,
    committed,
    empty_table,
    land,
    orphan_rows,
    write_uncommitted,
)

SETTLE = 120.0
# Cutoff BASE + 90.05 s: sequences 1..900 of every series were received (and their ledger
# ranges answered) by then; 901 onwards were not.
AS_OF = datetime.fromtimestamp(BASE + 90.05 + SETTLE, UTC)


def counts(result: AuditResult) -> dict[str, int | None]:
    return {
        "accepted": result.accepted,
        "landed": result.landed,
        "lost": result.lost,
        "duplicated": result.duplicated,
        "after_cutoff": result.after_cutoff,
        "in_flight": result.in_flight,
        "refused": result.refused,
        "unacknowledged": result.unacknowledged,
    }


def test_drained_from_sequences(analytics: SparkAnalytics, planted_dir: Path) -> None:
    result = analytics.audit(planted_dir, drained=True)
    # accepted: 10 series x 1000, gw-b/proj-3 up to 990 (its tail is invisible), gw-b/proj-5
    # up to 1003. lost: 2 + 1 + 5 (the refused range looks lost) + 1 (950).
    assert counts(result) == {
        "accepted": 11_993,
        "landed": 11_993 - 9 + 5,
        "lost": 9,
        "duplicated": 5,
        "after_cutoff": 0,
        "in_flight": None,
        "refused": None,
        "unacknowledged": None,
    }
    assert result.series == 12
    assert result.announcements == 12
    assert result.conflicting == 0
    assert result.accepted_from == "sequences"
    assert result.limits  # the output says what it cannot see
    assert not result.ok
    assert result.lost_ranges == (
        LostRange("gw-a", "proj-0", 5, 6),
        LostRange("gw-a", "proj-1", 500, 500),
        LostRange("gw-a", "proj-4", 301, 305),
        LostRange("gw-b", "proj-3", 950, 950),
    )
    assert result.lost_per_million == pytest.approx(9 / 11_993 * 1e6)
    assert result.duplicated_per_million == pytest.approx(5 / 11_993 * 1e6)
    worst = [(s.gateway_id, s.project_id, s.lost, s.duplicated) for s in result.worst]
    assert worst == [
        ("gw-a", "proj-4", 5, 0),
        ("gw-a", "proj-0", 2, 2),
        ("gw-a", "proj-1", 1, 0),
        ("gw-b", "proj-3", 1, 0),
        ("gw-b", "proj-2", 0, 3),
    ]


def test_as_of_counts_only_what_is_due(analytics: SparkAnalytics, planted_dir: Path) -> None:
    """In flight vs lost: 950 of gw-b/proj-3 was received after the cutoff, so it may still
    be on its way and is not lost; drained, the same gap is a loss."""
    result = analytics.audit(planted_dir, as_of=AS_OF, settle_seconds=SETTLE)
    assert counts(result) == {
        "accepted": 12 * 900,
        "landed": 12 * 900 - 8 + 5,
        "lost": 8,
        "duplicated": 5,
        # rows of sequences 901+: 11 series x 100, gw-b/proj-3 901..990 but 950, and the 3
        # rows of gw-b/proj-5 past 1000
        "after_cutoff": 1100 + 89 + 3,
        "in_flight": None,
        "refused": None,
        "unacknowledged": None,
    }
    assert result.cutoff == datetime.fromtimestamp(BASE + 90.05, UTC)
    assert LostRange("gw-b", "proj-3", 950, 950) not in result.lost_ranges
    drained = analytics.audit(planted_dir, drained=True)
    assert LostRange("gw-b", "proj-3", 950, 950) in drained.lost_ranges


def test_drained_from_the_ledger(analytics: SparkAnalytics, planted_dir: Path) -> None:
    """The ledger sees the tail loss and tells the refused range from a loss."""
    result = analytics.audit(planted_dir, drained=True, ledger_dir=planted_dir / "_ledger")
    assert counts(result) == {
        "accepted": 12 * 1000 - 5,
        "landed": 11_995 - 14 + 5,
        "lost": 2 + 1 + 1 + 10,
        "duplicated": 5,
        "after_cutoff": 0,
        "in_flight": 0,
        "refused": 5 + 3,
        "unacknowledged": 3,
    }
    assert result.accepted_from == "ledger"
    assert result.limits == ()
    assert result.lost_ranges == (
        LostRange("gw-a", "proj-0", 5, 6),
        LostRange("gw-a", "proj-1", 500, 500),
        LostRange("gw-b", "proj-3", 950, 950),
        LostRange("gw-b", "proj-3", 991, 1000),
    )


def test_as_of_from_the_ledger(analytics: SparkAnalytics, planted_dir: Path) -> None:
    result = analytics.audit(
        planted_dir,
        as_of=AS_OF,
        settle_seconds=SETTLE,
        ledger_dir=planted_dir / "_ledger",
    )
    assert counts(result) == {
        "accepted": 12 * 900 - 5,
        "landed": 10_795 - 3 + 5,
        "lost": 3,
        "duplicated": 5,
        "after_cutoff": 1100 + 89,  # accepted after the cutoff and already landed
        "in_flight": 11,  # accepted after the cutoff, not landed (yet): 950, 991..1000
        "refused": 8,
        "unacknowledged": 3,
    }


def test_nothing_lost(analytics: SparkAnalytics, clean_dir: Path) -> None:
    result = analytics.audit(clean_dir, drained=True)
    assert (result.accepted, result.lost, result.duplicated) == (2000, 0, 3)
    assert result.ok
    value, bound = nines(0, 2000)
    assert bound and value == pytest.approx(3.301, abs=1e-3)
    assert result.nines.startswith("≥ 3.30 nines")


def test_nines() -> None:
    assert nines(0, 1_000_000) == (6.0, True)
    value, bound = nines(3, 1_000_000)
    assert not bound and value == pytest.approx(5.5229, abs=1e-4)
    assert nines(0, 0) == (None, False)


def test_missing_directory(analytics: SparkAnalytics, tmp_path: Path) -> None:
    with pytest.raises(LandingDirError, match="does not exist"):
        analytics.audit(tmp_path / "nope", drained=True)


def test_a_directory_with_no_delta_table_is_refused(
    analytics: SparkAnalytics, tmp_path: Path, planted: Planted
) -> None:
    """Without a ``_delta_log`` nothing says which files are data: neither an empty folder
    nor one of Parquet files reads as a table."""
    with pytest.raises(LandingDirError, match=r"not a Delta table \(no version in _delta_log/\)"):
        analytics.audit(tmp_path, drained=True)
    write_uncommitted(tmp_path, planted.rows[:100])
    with pytest.raises(LandingDirError, match="not a Delta table: it holds Parquet files"):
        analytics.audit(tmp_path, drained=True)


def test_an_empty_table_accepts_nothing(analytics: SparkAnalytics, tmp_path: Path) -> None:
    empty_table(tmp_path)
    result = analytics.audit(tmp_path, drained=True)
    assert (result.accepted, result.landed, result.lost, result.series) == (0, 0, 0, 0)
    assert result.ok


def test_two_message_ids_on_one_sequence(analytics: SparkAnalytics, tmp_path: Path) -> None:
    """A sequence landed under two message ids is a gateway bug: counted, and a duplicate."""
    rows = [r for r in build_planted().rows if r.envelope.project_id == "proj-5"][:4]
    # gw-a/proj-5: the announcement and sequences 1..3; land sequence 2 again, new id
    twin = replace(rows[2], envelope=replace(rows[2].envelope, message_id="another-id"))
    land(tmp_path, [*rows, twin])
    result = analytics.audit(tmp_path, drained=True)
    assert (result.accepted, result.landed, result.duplicated, result.conflicting) == (3, 4, 1, 1)


def test_a_file_no_commit_names_is_not_read(
    analytics: SparkAnalytics, planted_dir: Path, planted: Planted
) -> None:
    """The orphan is a complete Parquet file in a date folder, holding 50 duplicates and a
    lost sequence: were it read, the audit would find 55 duplicates and 8 losses."""
    listed = {p.resolve() for p in planted_dir.glob("date=*/*.parquet")}
    table = set(committed(planted_dir))
    orphans = listed - table
    assert table < listed and len(orphans) == 1
    orphan = orphans.pop()
    assert pq.read_metadata(orphan).num_rows == len(orphan_rows(planted)) == 51
    result = analytics.audit(planted_dir, drained=True)
    assert (result.landed, result.lost, result.duplicated) == (11_993 - 9 + 5, 9, 5)
    assert LostRange("gw-a", "proj-1", 500, 500) in result.lost_ranges


def test_duplicates_in_committed_files_are_counted(
    analytics: SparkAnalytics, tmp_path: Path, planted: Planted
) -> None:
    """A committed file that repeats rows of another committed file (as at-least-once
    landing did): the audit counts exactly those rows as duplicates."""
    series = [
        r
        for r in planted.rows
        if (r.envelope.gateway_id, r.envelope.project_id) == ("gw-a", "proj-2")
    ]
    land(tmp_path, series, batch=400)  # 1001 rows in 3 files; nothing lost or duplicated
    before = analytics.audit(tmp_path, drained=True)
    assert (before.accepted, before.landed, before.lost, before.duplicated) == (1000, 1000, 0, 0)
    first = pq.read_table(committed(tmp_path)[0])
    again = {*first.column("message_id").to_pylist()[:7]}
    repeated = [r for r in series if r.envelope.message_id in again]
    commit(tmp_path, write_uncommitted(tmp_path, repeated))  # committed: added only
    after = analytics.audit(tmp_path, drained=True)
    duplicated = sum(1 for r in repeated if r.envelope.kind is not MessageKind.ANNOUNCE)
    assert duplicated >= 6
    assert (after.accepted, after.landed, after.lost, after.duplicated) == (
        1000,
        1000 + duplicated,
        0,
        duplicated,
    )
    assert after.announcements == 1 + (len(repeated) - duplicated)


# Dead letters, as `shoal analytics audit --dead-letters` hands them over: gw-a/proj-0 5
# and 6 and gw-b/proj-3 950 (lost above), 991 (the tail the ledger sees as lost), and
# gw-a/proj-2 10, which landed (a dead-letter copy of a landed message stays landed).
DEAD = [
    ("gw-a", "proj-0", 5, BASE + 0.5),
    ("gw-a", "proj-0", 6, BASE + 0.6),
    ("gw-b", "proj-3", 950, BASE + 95.0),
    ("gw-b", "proj-3", 991, BASE + 99.1),
    ("gw-a", "proj-2", 10, BASE + 1.0),
]


def test_dead_letters_are_counted_as_such_from_the_ledger(
    analytics: SparkAnalytics, planted_dir: Path
) -> None:
    result = analytics.audit(
        planted_dir,
        drained=True,
        ledger_dir=planted_dir / "_ledger",
        dead_letters=DEAD,
    )
    assert (result.accepted, result.lost, result.dead_lettered) == (11_995, 14 - 4, 4)
    assert result.landed == 11_995 - 14 + 5  # as without dead letters
    assert result.failed == 14
    assert result.lost_ranges == (
        LostRange("gw-a", "proj-1", 500, 500),
        LostRange("gw-b", "proj-3", 992, 1000),
    )
    assert result.to_json()["dead_lettered"] == 4


def test_dead_letters_fill_gaps_and_extend_tails_from_sequences(
    analytics: SparkAnalytics, planted_dir: Path
) -> None:
    result = analytics.audit(planted_dir, drained=True, dead_letters=DEAD)
    # 991 was accepted (it reached the broker): gw-b/proj-3 now runs to 991.
    assert (result.accepted, result.lost, result.dead_lettered) == (11_994, 9 - 3, 4)
    assert LostRange("gw-b", "proj-3", 950, 950) not in result.lost_ranges
    assert LostRange("gw-a", "proj-0", 5, 6) not in result.lost_ranges
