"""``S3Settings``: how to reach the object store (env prefix ``SHOAL_S3_``). Anything left
unset falls back to the AWS SDK's own chain: ``AWS_ENDPOINT_URL``, ``AWS_REGION``,
``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` / ``AWS_SESSION_TOKEN``, profiles,
instance roles, and ``AWS_CA_BUNDLE`` for TLS."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = ["S3Settings"]


class S3Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="SHOAL_S3_", extra="ignore")

    endpoint_url: str | None = Field(
        default=None,
        description="an S3-compatible server, e.g. `http://127.0.0.1:9000`; unset for AWS",
    )
    region: str | None = Field(default=None, description="the store's region")
    access_key_id: str | None = Field(default=None, description="the access key's id")
    secret_access_key: SecretStr | None = Field(default=None, description="its secret")
    verify_tls: bool = Field(default=True, description="False only for a test server")
    ca_bundle: str | None = Field(
        default=None, description="a PEM file of trusted CAs (unset: `AWS_CA_BUNDLE`)"
    )
    addressing_style: Literal["auto", "path", "virtual"] = Field(
        default="auto",
        description="auto: path style (bucket in the path) with an endpoint_url, virtual "
        "hosts on AWS",
    )
    request_timeout: float = Field(default=10.0, gt=0, description="seconds: every request")
    max_attempts: int = Field(default=3, ge=1, description="the SDK's retries per call")
