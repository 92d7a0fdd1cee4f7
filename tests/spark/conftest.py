"""One Spark session for the whole run, and the generated landing directories.

The session starts once (about 5-10 s) and stops when the run ends; every test, the CLI's
included (it runs in-process through typer's CliRunner), shares it. Each directory is a
landing zone's Delta table: what the sink wrote, committed through ``DeltaLandedTable``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from adapters.spark import SparkAnalytics, SparkSettings, stop_spark
from tests.spark._landing import (
    Planted,
    build_planted,
    land,
    orphan_rows,
    skewed_rows,
    write_ledger,
    write_uncommitted,
)

SKEWED_PARTITIONS = 16
# Rows per partition: heavy-tailed, heaviest partitions spread over the ids.
SKEWED_LOADS = (300, 4000, 50, 1500, 20, 800, 3000, 100, 600, 2000, 80, 400, 1000, 150, 200, 500)


@pytest.fixture(scope="session")
def analytics() -> Iterator[SparkAnalytics]:
    with SparkAnalytics(SparkSettings()) as started:
        yield started
    stop_spark()


@pytest.fixture(scope="session")
def planted() -> Planted:
    return build_planted()


@pytest.fixture(scope="session")
def planted_dir(tmp_path_factory: pytest.TempPathFactory, planted: Planted) -> Path:
    """The planted rows, a ledger in ``_ledger``, and what readers must not see: a torn
    temporary file, and a complete Parquet file the sink wrote but no commit added
    (``orphan_rows``: copies of landed rows, and a sequence planted as lost)."""
    data_dir = tmp_path_factory.mktemp("planted")
    land(data_dir, planted.rows)
    write_ledger(data_dir / "_ledger", planted.ledger)
    some_folder = next(data_dir.glob("date=*"))
    (some_folder / ".h9-0123456789abcdef.tmp").write_bytes(b"PAR1 torn write, not parquet")
    write_uncommitted(data_dir, orphan_rows(planted))
    return data_dir


@pytest.fixture(scope="session")
def clean_dir(tmp_path_factory: pytest.TempPathFactory, planted: Planted) -> Path:
    """Only the series with nothing missing (one redelivery kept): nothing lost."""
    data_dir = tmp_path_factory.mktemp("clean")
    keep = {("gw-a", "proj-2"), ("gw-b", "proj-2")}
    land(
        data_dir,
        [r for r in planted.rows if (r.envelope.gateway_id, r.envelope.project_id) in keep],
    )
    return data_dir


@pytest.fixture(scope="session")
def skewed_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    data_dir = tmp_path_factory.mktemp("skewed")
    land(data_dir, skewed_rows(SKEWED_PARTITIONS, SKEWED_LOADS), batch=5000)
    return data_dir
