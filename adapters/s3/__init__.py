"""The landing zone on an S3-compatible object store (AWS S3, MinIO, Ceph RGW, R2): the
Sink port (``S3ParquetSink``), the LandingLog port (``S3LandingLog``) and the ZoneFiles port
(``S3ZoneFiles``), with the same layout as on a disk under ``s3://bucket/prefix``."""

from adapters.s3._client import S3Location, s3_client
from adapters.s3._files import S3ZoneFiles
from adapters.s3._log import S3LandingLog
from adapters.s3._settings import S3Settings
from adapters.s3._sink import S3ParquetSink

__all__ = [
    "S3LandingLog",
    "S3Location",
    "S3ParquetSink",
    "S3Settings",
    "S3ZoneFiles",
    "s3_client",
]
