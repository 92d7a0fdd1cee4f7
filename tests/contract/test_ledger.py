"""The AcceptanceLedger contract, run against the JSON Lines ledger and the in-memory one:
entries come back in order and complete; for the file, across a reopen, and a line torn
by a crash does not hide the lines before it."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from adapters.ledger import JsonlLedger, ledger_line
from adapters.memory import InMemoryLedger
from core.messages import LedgerEntry, Outcome

pytestmark = pytest.mark.anyio


def entry(first: int, outcome: Outcome = Outcome.ACCEPTED) -> LedgerEntry:
    return LedgerEntry("gw-1", "dev-1", first, first + 9, outcome, 1.5, 1.75)


def _parse(path: Path) -> list[dict[str, object]]:
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:
            continue  # a torn last line, as readers skip it
    return rows


async def _record_file(tmp_path: Path, entries: list[LedgerEntry]) -> list[dict[str, object]]:
    async with JsonlLedger(tmp_path / "_ledger", "gw-1") as ledger:
        for e in entries:
            await ledger.record(e)
        # Flushed before record returns: readable now, before any fsync or close.
        readable_before_close = _parse(ledger.path)
    assert readable_before_close == _parse(tmp_path / "_ledger" / "gw-1.jsonl")
    return _parse(tmp_path / "_ledger" / "gw-1.jsonl")


async def _record_memory(_: Path, entries: list[LedgerEntry]) -> list[dict[str, object]]:
    ledger = InMemoryLedger()
    for e in entries:
        await ledger.record(e)
    return [json.loads(ledger_line(e)) for e in ledger.entries]


@pytest.mark.parametrize("record", [_record_file, _record_memory], ids=["jsonl", "memory"])
async def test_entries_come_back_in_order_when_recorded(
    tmp_path: Path,
    record: Callable[[Path, list[LedgerEntry]], Awaitable[list[dict[str, object]]]],
) -> None:
    entries = [entry(1), entry(11, Outcome.REFUSED), entry(21)]
    rows = await record(tmp_path, entries)
    assert rows == [
        {
            "v": 1,
            "gateway_id": "gw-1",
            "project_id": "dev-1",
            "first_sequence": f,
            "last_sequence": f + 9,
            "outcome": o,
            "received_at": 1.5,
            "decided_at": 1.75,
        }
        for f, o in ((1, "accepted"), (11, "refused"), (21, "accepted"))
    ]


async def test_file_appends_after_a_torn_line_when_reopened(tmp_path: Path) -> None:
    await _record_file(tmp_path, [entry(1)])
    path = tmp_path / "_ledger" / "gw-1.jsonl"
    with path.open("a") as crashed:
        crashed.write('{"v": 1, "gateway_id": "gw-1", "proj')  # cut short by a crash
    async with JsonlLedger(tmp_path / "_ledger", "gw-1") as ledger:
        await ledger.record(entry(11))
    firsts = [row["first_sequence"] for row in _parse(path)]
    assert firsts == [1, 11]  # the torn line hides neither what came before nor after
