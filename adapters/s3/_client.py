"""The boto3 client and the ``s3://bucket/prefix`` location every S3 adapter works under."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from adapters.s3._settings import S3Settings

__all__ = ["S3Location", "call", "delete_objects", "list_objects", "s3_client", "usage"]


@dataclass(frozen=True, slots=True)
class S3Location:
    """``s3://bucket/prefix``: ``key("a/b")`` is ``prefix/a/b`` (or ``a/b`` without prefix)."""

    bucket: str
    prefix: str = ""

    @classmethod
    def parse(cls, url: str) -> S3Location:
        """``ValueError`` naming the problem when ``url`` is not ``s3://bucket[/prefix]``."""
        if not url.startswith("s3://"):
            raise ValueError(f"{url!r} is not an s3:// URL")
        bucket, _, prefix = url.removeprefix("s3://").partition("/")
        if not bucket or "/" in bucket or bucket != bucket.strip():
            raise ValueError(f"{url!r} names no bucket (s3://bucket/prefix)")
        return cls(bucket, prefix.strip("/"))

    def key(self, relative: str) -> str:
        return f"{self.prefix}/{relative}" if self.prefix else relative

    def relative(self, key: str) -> str:
        return key.removeprefix(f"{self.prefix}/") if self.prefix else key

    def __str__(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}" if self.prefix else f"s3://{self.bucket}"


def s3_client(settings: S3Settings) -> Any:
    """A boto3 S3 client (thread-safe; its calls block: run them in a worker thread)."""
    style = settings.addressing_style
    if style == "auto":
        style = "path" if settings.endpoint_url else "virtual"
    secret = settings.secret_access_key
    return boto3.client(
        "s3",
        endpoint_url=settings.endpoint_url,
        region_name=settings.region,
        aws_access_key_id=settings.access_key_id,
        aws_secret_access_key=secret.get_secret_value() if secret is not None else None,
        verify=settings.ca_bundle or settings.verify_tls,
        config=Config(
            s3={"addressing_style": style},
            connect_timeout=settings.request_timeout,
            read_timeout=settings.request_timeout,
            retries={"max_attempts": settings.max_attempts, "mode": "standard"},
        ),
    )


def call(method: Any, **request: Any) -> Any:
    """``method(**request)``; the store's refusals and outages as ``OSError``."""
    try:
        return method(**request)
    except (ClientError, BotoCoreError) as exc:
        raise OSError(f"S3 {getattr(method, '__name__', 'call')}: {exc}") from exc


def list_objects(
    client: Any, bucket: str, prefix: str, *, start_after: str = ""
) -> Iterator[dict[str, Any]]:
    """Every object (``list_objects_v2``'s entries) whose key starts with ``prefix``, in key
    order, after the key ``start_after`` when given; page by page."""
    token: str | None = None
    while True:
        request: dict[str, Any] = {"Bucket": bucket, "Prefix": prefix}
        if token:
            request["ContinuationToken"] = token
        elif start_after:
            request["StartAfter"] = start_after
        page = call(client.list_objects_v2, **request)
        yield from page.get("Contents", ())
        token = page.get("NextContinuationToken")
        if not token:
            return


def delete_objects(client: Any, location: S3Location, paths: Sequence[str]) -> None:
    """Delete the objects at ``paths`` (relative to ``location``); one already gone is no
    error. ``OSError`` when the store refuses any."""
    for start in range(0, len(paths), 1000):  # DeleteObjects takes 1,000 keys a call
        chunk = paths[start : start + 1000]
        response = call(
            client.delete_objects,
            Bucket=location.bucket,
            Delete={"Objects": [{"Key": location.key(p)} for p in chunk]},
        )
        if response.get("Errors"):
            raise OSError(f"S3 delete in {location}: {response['Errors'][:3]}")


def usage(client: Any, location: S3Location, folder: str) -> tuple[int, int]:
    """How many objects and bytes ``folder`` (relative to ``location``) holds."""
    objects = list(list_objects(client, location.bucket, location.key(f"{folder.rstrip('/')}/")))
    return len(objects), sum(int(o["Size"]) for o in objects)
