"""The landing zone's data files on an S3-compatible object store (AWS S3, MinIO, Ceph RGW,
R2): the Sink port (``S3ParquetSink``), with the same layout as on a disk under
``s3://bucket/prefix``. The table over them is ``adapters.delta``."""

from adapters.s3._client import S3Location, s3_client, usage
from adapters.s3._settings import S3Settings
from adapters.s3._sink import S3ParquetSink

__all__ = ["S3Location", "S3ParquetSink", "S3Settings", "s3_client", "usage"]
