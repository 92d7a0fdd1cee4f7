"""The audit over requests sent with an ``Idempotency-Key``: each is a series of its own
(``idem-...``, sequences 1..n) recorded in the ledger under that series. A first attempt
answered 503 whose messages were stored, then retried with 202, is in the ledger as
refused and accepted: accepted once, nothing lost. A retry past every window lands again
under the same ids: duplicated, never conflicting (one message id per sequence)."""

from __future__ import annotations

from pathlib import Path

from adapters.spark import SparkAnalytics
from core.idempotency import fingerprint, identity
from core.ingest import announcement, stamp
from core.messages import LandedRow
from tests.spark._landing import BASE, LedgerRange, delivered, land, write_ledger

PARTITIONS = 16


def _request(project: str, key: str, count: int, at: float) -> tuple[str, list[LandedRow]]:
    payloads = [b'{"k": "%s", "i": %d}' % (key.encode(), i) for i in range(count)]
    ident = identity(project, key, fingerprint(payloads))
    envelopes = stamp(
        project,
        payloads,
        gateway_id=ident.series_id,
        first_sequence=1,
        message_ids=ident.message_ids(count),
        received_at=at,
        partitions=PARTITIONS,
    )
    return ident.series_id, [LandedRow(e, 1, "h1", at + 0.1) for e in envelopes]


def test_keyed_requests_are_series_of_their_own_accepted_once(
    analytics: SparkAnalytics, tmp_path: Path
) -> None:
    one, rows_one = _request("proj-1", "order-1", 5, BASE)
    two, rows_two = _request("proj-1", "order-2", 3, BASE + 1)
    again, _ = _request("proj-1", "order-2", 3, BASE + 900)  # the same request, past the window
    assert again == two
    opened = announcement(
        "proj-1", gateway_id="gw-a.1", message_id="a-1", received_at=BASE, partitions=PARTITIONS
    )
    rows = [LandedRow(opened, 1, "h1", BASE + 0.1), *rows_one, *rows_two, rows_two[1]]
    land(tmp_path, delivered(rows))
    write_ledger(
        tmp_path / "_ledger",
        [
            LedgerRange(one, "proj-1", 1, 5, "refused", BASE + 10),  # gateway A: 503
            LedgerRange(one, "proj-1", 1, 5, "accepted", BASE + 20),  # gateway B: 202
            LedgerRange(two, "proj-1", 1, 3, "accepted", BASE + 30),
            LedgerRange(two, "proj-1", 1, 3, "accepted", BASE + 930),  # landed again
        ],
    )
    result = analytics.audit(tmp_path, drained=True, ledger_dir=tmp_path / "_ledger")
    assert (result.series, result.accepted, result.landed) == (2, 8, 9)
    assert (result.lost, result.duplicated, result.conflicting) == (0, 1, 0)
    assert result.refused == 5
    assert result.announcements == 1
