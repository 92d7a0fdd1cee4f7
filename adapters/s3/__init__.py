"""The landing zone on an S3-compatible object store (AWS S3, MinIO, Ceph RGW, R2): where it
is (``S3Location``) and how to reach it (``S3Settings``). The boto3 client is
``adapters.s3.client``, the Sink port on it (Parquet files, the same layout as on a disk
under ``s3://bucket/prefix``) ``adapters.s3.sink.S3ParquetSink``: modules of their own
because they import boto3 and pyarrow, which a leader that only keeps the table up does
without. The table over the files is ``adapters.delta``. ``check_conditional_create``
probes that the store refuses a second create of one key, which Delta's commits rely on
(in a child process: it imports boto3)."""

from adapters.s3._location import S3Location
from adapters.s3._probe import check_conditional_create
from adapters.s3._settings import S3Settings

__all__ = ["S3Location", "S3Settings", "check_conditional_create"]
