"""`shoal up`'s progress: the landing rate smoothed over the roll age, the messages the
gateways' acceptance ledgers record, and the final line."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st

from adapters.ledger import JsonlLedger, ledger_line
from core.messages import LedgerEntry, Outcome
from services.cli._up import (
    PROGRESS_EVERY,
    AcceptanceLedgers,
    LandingRate,
    accepted_messages,
    final_line,
)

RATE = 100.0  # rows per second sent to the handlers


def _entry(first: int, count: int, outcome: Outcome = Outcome.ACCEPTED) -> LedgerEntry:
    return LedgerEntry("gw-1.abc", "proj-0001", first, first + count - 1, outcome, 1.0, 1.5)


def test_a_steady_flow_reads_its_rate_from_the_first_sample_on() -> None:
    rate = LandingRate(window=10.0)
    assert rate.add(0.0, 0) == 0.0
    assert [rate.add(t, int(RATE * t)) for t in (3.0, 6.0, 9.0, 12.0, 15.0)] == [RATE] * 5


def test_the_rate_falls_to_zero_one_window_after_the_rows_stop() -> None:
    rate = LandingRate(window=6.0)
    for t in range(0, 13, 3):
        rate.add(float(t), int(RATE * t))
    assert rate.add(15.0, 1_200) == pytest.approx(RATE / 2)
    assert rate.add(18.0, 1_200) == 0.0


@given(
    roll_age=st.floats(1.0, 60.0),
    late=st.floats(0.0, PROGRESS_EVERY),  # how long after its roll age a file lands
    handlers=st.integers(1, 4),
    phase=st.floats(0.0, 30.0),
    gaps=st.lists(st.floats(PROGRESS_EVERY, PROGRESS_EVERY + 1.0), min_size=40, max_size=40),
)
def test_rows_landing_a_file_at_a_time_read_as_a_rate_never_zero_between_rolls(
    roll_age: float, late: float, handlers: int, phase: float, gaps: list[float]
) -> None:
    """Each handler lands its rows every roll age (plus the time its write takes), all at
    once; `shoal up` samples the count about every PROGRESS_EVERY seconds. Once a roll has
    landed, the rate it shows stays within a factor of about two of the rows sent."""
    period = roll_age + late
    window = roll_age + 2 * PROGRESS_EVERY

    def landed(at: float) -> int:
        rows = 0.0
        for handler in range(handlers):
            first_roll = phase + period + handler * period / handlers
            if at >= first_roll:
                rolls = (at - first_roll) // period + 1
                rows += rolls * RATE * period / handlers
        return int(rows)

    rate = LandingRate(window)
    rate.add(0.0, 0)
    at = 0.0
    for gap in gaps:
        at += gap
        shown = rate.add(at, landed(at))
        if at > phase + 2 * period + window:
            assert 0.4 * RATE < shown <= 2 * RATE, (at, shown)


def test_the_ledger_counts_the_messages_of_accepted_requests_only() -> None:
    lines = [
        ledger_line(_entry(0, 10)).encode(),
        ledger_line(_entry(10, 5, Outcome.REFUSED)).encode(),
        ledger_line(_entry(15, 1)).encode(),
        b'{"v":1,"gateway_id":"gw-1.abc","project_id":"proj-0001","first_seq',  # cut short
    ]
    assert accepted_messages(lines) == 11


def test_the_ledgers_are_read_as_they_grow_from_where_the_run_started(tmp_path: Path) -> None:
    """One file per gateway process: those of an earlier run are skipped, a line still
    being written is counted once it is whole."""

    async def record(gateway: str, *entries: LedgerEntry) -> None:
        async with JsonlLedger(tmp_path, gateway) as ledger:
            for entry in entries:
                await ledger.record(entry)

    anyio.run(record, "earlier", _entry(0, 50))
    ledgers = AcceptanceLedgers(tmp_path)
    ledgers.skip_existing()
    assert ledgers.refresh() == 0

    anyio.run(record, "gw-1.abc", _entry(0, 10), _entry(10, 3, Outcome.REFUSED))
    assert ledgers.refresh() == 10
    line = ledger_line(_entry(13, 7)) + "\n"
    with (tmp_path / "gw-1.abc.jsonl").open("a") as file:
        file.write(line[:20])
        file.flush()
        assert ledgers.refresh() == 10
        file.write(line[20:])
    assert ledgers.refresh() == 17
    anyio.run(record, "gw-1.def", _entry(0, 4))
    assert ledgers.refresh() == 21


def test_the_final_line_names_the_counts_and_the_tables_version() -> None:
    assert final_line(12_020, 12_020, "s3://shoal/landing", 57) == (
        "stopped: accepted 12,020  landed 12,020  table s3://shoal/landing (version 57)"
    )
    assert final_line(0, 0, Path("/data/zone"), -1) == (
        "stopped: accepted 0  landed 0  table /data/zone (no table yet)"
    )
