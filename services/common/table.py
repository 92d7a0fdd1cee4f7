"""Reading the landing zone's Delta table: every reader in shoal (``shoal analytics``,
``shoal up``'s progress, the tests' audits) goes through these, never through a glob of the
folder, which also holds files no version names (a crashed writer's, files compacted away
and not yet vacuumed)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError

from adapters.delta.table import TABLE_SCHEMA
from adapters.s3 import S3Settings
from services.common.table_address import table_address

__all__ = ["LandedSummary", "landed_summary", "landed_table", "read_landed"]


@dataclass(frozen=True, slots=True)
class LandedSummary:
    """The table's newest version (-1: no table yet), its rows and its data files (paths
    relative to the table's root)."""

    version: int
    rows: int
    files: tuple[str, ...]


def landed_table(location: str | Path, s3: S3Settings | None = None) -> DeltaTable | None:
    """The newest version of the zone's table; None when no table is there yet. Raises
    ``OSError`` (delta-rs's errors) when the storage cannot be read, ``ValueError`` for an
    ``s3://`` URL without a bucket."""
    address = table_address(location, s3)
    try:
        return DeltaTable(address.uri, storage_options=address.storage_options)
    except TableNotFoundError:
        return None
    except OSError:
        raise
    except Exception as exc:  # delta-rs's own errors, object-store failures among them
        raise OSError(f"cannot read the Delta table at {location}: {exc}") from exc


def read_landed(
    location: str | Path, s3: S3Settings | None = None, *, columns: Sequence[str] | None = None
) -> pa.Table:
    """The zone's rows (``columns`` of them, all by default), read through the table's
    newest version: an empty table when there is none."""
    table = landed_table(location, s3)
    if table is None:
        schema = (
            TABLE_SCHEMA if columns is None else pa.schema([TABLE_SCHEMA.field(c) for c in columns])
        )
        return schema.empty_table()
    return table.to_pyarrow_dataset().to_table(columns=None if columns is None else list(columns))


def landed_summary(location: str | Path, s3: S3Settings | None = None) -> LandedSummary:
    table = landed_table(location, s3)
    if table is None:
        return LandedSummary(-1, 0, ())
    actions = pa.table(table.get_add_actions(flatten=True))
    rows = sum(r or 0 for r in actions.column("num_records").to_pylist())
    return LandedSummary(table.version(), rows, tuple(sorted(actions.column("path").to_pylist())))
