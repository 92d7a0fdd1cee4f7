"""The schema of landed data (docs/architecture.md copies this docstring).

Layout: ``{data_dir}/date=YYYY-MM-DD/{handler_id}-{uuid}.parquet``, one file per roll of
a handler's buffer (and per date within it): many partitions in one file, sorted by
partition, project and sequence, so files are large (thousands of rows, not one per
fetched batch and partition) while a reader filtering on ``partition`` still skips most
of each file by its row-group statistics. ``date`` is the UTC date of ``received_at``
(the gateway's clock), so every copy of a message, redelivered or not, lands under the
same date. Files appear atomically: they are written under a name starting with ``.``
and ending in ``.tmp`` (which Spark and pyarrow skip), fsynced, then renamed, and the
directory is fsynced.

=============  ======================  =====================================================
column         type                    meaning
=============  ======================  =====================================================
message_id     string                  the gateway's unique id; duplicates are redeliveries
project_id     string                  the device project
partition      int32                   partition of project_id
generation     int64                   assignment generation the handler worked under
handler_id     string                  the handler that landed the row
gateway_id     string                  the gateway that accepted the message
sequence       int64                   per (gateway_id, project_id), from 1 without gaps
received_at    timestamp[us, UTC]      when the gateway accepted it
handled_at     timestamp[us, UTC]      when the handler landed it
kind           string                  ``announce`` or ``data``
payload        binary                  the message body as received
=============  ======================  =====================================================

No column is nullable. Readers that partition by folder (Spark, ``pyarrow.dataset`` with
``partitioning="hive"``) see ``date`` (string) from the path.
"""

from __future__ import annotations

import pyarrow as pa

__all__ = ["LANDED_SCHEMA"]

LANDED_SCHEMA = pa.schema(
    [
        pa.field("message_id", pa.string(), nullable=False),
        pa.field("project_id", pa.string(), nullable=False),
        pa.field("partition", pa.int32(), nullable=False),
        pa.field("generation", pa.int64(), nullable=False),
        pa.field("handler_id", pa.string(), nullable=False),
        pa.field("gateway_id", pa.string(), nullable=False),
        pa.field("sequence", pa.int64(), nullable=False),
        pa.field("received_at", pa.timestamp("us", tz="UTC"), nullable=False),
        pa.field("handled_at", pa.timestamp("us", tz="UTC"), nullable=False),
        pa.field("kind", pa.string(), nullable=False),
        pa.field("payload", pa.binary(), nullable=False),
    ]
)
