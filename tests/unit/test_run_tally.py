"""The whole-run judgement of a fault run (``tests.e2e._landed.tally_run``): every message id
accepted in the run must be in the table exactly once. It must be able to fail: a table
with an id landed twice, or without an accepted id, is reported."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
from deltalake import write_deltalake

from tests.e2e._landed import read_landed, tally_run

ACCEPTED = ["m-1", "m-2", "m-3"]


def _table(*ids: str) -> pa.Table:
    return pa.table({"message_id": pa.array(ids, pa.string())})


def test_every_accepted_id_once_is_exactly_once() -> None:
    tally = tally_run(ACCEPTED, _table("m-3", "m-1", "m-2"))
    assert tally.exactly_once
    assert (tally.accepted, tally.landed, tally.missing, tally.duplicated) == (3, 3, 0, 0)
    assert tally.line().startswith("accepted=3 landed=3 missing=0 duplicated=0")


def test_one_id_landed_twice_is_reported() -> None:
    tally = tally_run(ACCEPTED, _table("m-1", "m-2", "m-2", "m-3"))
    assert not tally.exactly_once
    assert (tally.missing, tally.duplicated, tally.duplicated_ids) == (0, 2, 1)
    assert tally.examples == ("m-2",)
    assert "duplicated=2" in tally.line()


def test_a_warm_up_id_landed_twice_counts_like_any_other() -> None:
    """The first ids accepted (before any fault: no row judges them) are the run's too."""
    tally = tally_run(["warm-1", *ACCEPTED], _table("warm-1", "warm-1", *ACCEPTED))
    assert (tally.accepted, tally.duplicated_ids, tally.examples) == (4, 1, ("warm-1",))


def test_an_accepted_id_missing_is_reported() -> None:
    tally = tally_run(ACCEPTED, _table("m-1", "m-3"))
    assert not tally.exactly_once
    assert (tally.missing, tally.duplicated, tally.examples) == (1, 0, ("m-2",))


def test_an_id_no_202_named_landed_twice_is_a_duplicate_too() -> None:
    tally = tally_run(ACCEPTED, _table(*ACCEPTED, "other", "other", "other"))
    assert (tally.landed, tally.duplicated, tally.duplicated_ids) == (6, 3, 1)
    assert not tally.exactly_once


def test_a_duplicate_committed_to_a_delta_table_is_read_and_reported(tmp_path: Path) -> None:
    """The same judgement through the fault runs' reader: two commits, the second landing
    an id the first did (what a handler that lost its lease and still committed would do)."""
    write_deltalake(tmp_path, _table("m-1", "m-2"))
    write_deltalake(tmp_path, _table("m-2", "m-3"), mode="append")
    tally = tally_run(ACCEPTED, read_landed(tmp_path, columns=["message_id"]))
    assert (tally.landed, tally.missing, tally.duplicated, tally.duplicated_ids) == (4, 0, 2, 1)
    assert not tally.exactly_once


def test_files_the_committed_version_no_longer_names_are_not_counted(tmp_path: Path) -> None:
    """A compaction rewrites rows into a new file; the old one stays on disk until the
    vacuum. The table's committed version is the truth, not the folder."""
    write_deltalake(tmp_path, _table("m-1", "m-2"))
    write_deltalake(tmp_path, _table(*ACCEPTED), mode="overwrite")
    assert len(list(tmp_path.glob("*.parquet"))) == 2
    tally = tally_run(ACCEPTED, read_landed(tmp_path, columns=["message_id"]))
    assert tally.exactly_once, tally.line()
