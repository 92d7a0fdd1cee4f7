"""A fresh bucket (and prefix) on the session's S3-compatible server, per test."""

from __future__ import annotations

import uuid
from typing import Any

from pydantic import SecretStr

from adapters.s3 import S3Location, S3Settings
from adapters.s3.client import s3_client
from infra.local._testservers import ServerInfo

__all__ = ["fresh_bucket", "s3_env", "settings_for"]


def settings_for(server: ServerInfo) -> S3Settings:
    key, secret = server.credentials or (None, None)
    return S3Settings(
        endpoint_url=server.url,
        region="us-east-1",
        access_key_id=key,
        secret_access_key=SecretStr(secret) if secret else None,
    )


def fresh_bucket(server: ServerInfo) -> tuple[Any, S3Location]:
    """A client and ``s3://shoal-test-<random>/zone``, the bucket created."""
    client = s3_client(settings_for(server))
    bucket = f"shoal-test-{uuid.uuid4().hex[:12]}"
    client.create_bucket(Bucket=bucket)
    return client, S3Location(bucket, "zone")


def s3_env(server: ServerInfo) -> dict[str, str]:
    """The SHOAL_S3_* variables that point shoal's processes at ``server``."""
    key, secret = server.credentials or ("", "")
    return {
        "SHOAL_S3_ENDPOINT_URL": server.url,
        "SHOAL_S3_REGION": "us-east-1",
        "SHOAL_S3_ACCESS_KEY_ID": key,
        "SHOAL_S3_SECRET_ACCESS_KEY": secret,
    }
