"""The boto3 client every S3 adapter talks through, and its calls."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from adapters.s3._location import S3Location
from adapters.s3._settings import S3Settings

__all__ = ["call", "delete_objects", "s3_client"]


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
