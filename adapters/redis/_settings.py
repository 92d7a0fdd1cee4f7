"""``RedisSettings``: where Redis is, how to log in and how long to wait for it (env prefix
``SHOAL_REDIS_``)."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar, Self
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import SettingsConfigDict

from adapters._credentials import ConnectionSecurity, redact_url
from adapters._store_settings import StoreTiming

_SCHEMES = ("redis", "rediss", "unix")


class RedisSettings(StoreTiming, ConnectionSecurity):
    """Connection and timing settings shared by every Redis adapter.

    ``url`` is a redis-py URL (``redis://host:port/db``, ``rediss://`` for TLS,
    ``unix:///path?db=0``). Every key lives under ``shoal:{group}:``.

    Credentials: ``password`` (or ``password_file``), with ``username`` for an ACL user
    (without it: Redis's ``default`` user, ``requirepass``). A ``user:password@`` in the URL
    still works, but then the secret sits in a plain string: not both.
    TLS: a ``rediss://`` URL, or ``tls`` / any of ``tls_ca_file``, ``tls_cert_file`` +
    ``tls_key_file`` (see ``adapters._credentials``); the server's certificate must name the
    URL's host (``tls_server_name`` is not offered by redis-py).
    """

    _SECRETS: ClassVar[tuple[str, ...]] = ("password",)

    model_config = SettingsConfigDict(env_prefix="SHOAL_REDIS_", extra="ignore", frozen=True)

    url: str = Field(
        default="redis://127.0.0.1:6379/0",
        description="a `redis://host:port/db`, `rediss://` (TLS) or `unix:///path?db=0` URL; "
        "every key lives under `shoal:{group}:`. A `user:password@` in it works, but not "
        "together with `SHOAL_REDIS_USERNAME` / `SHOAL_REDIS_PASSWORD`",
    )
    events_maxlen: int = Field(
        default=10_000, ge=100, description="approximate cap of the change-event stream"
    )
    username: str | None = Field(
        default=None,
        description="an ACL user; unset: the `default` user (`requirepass`)",
    )
    password: SecretStr | None = Field(
        default=None,
        description="the password; not together with credentials in `SHOAL_REDIS_URL`",
    )
    password_file: Path | None = None

    @field_validator("url")
    @classmethod
    def _check_url(cls, value: str) -> str:
        scheme = urlsplit(value).scheme
        if scheme not in _SCHEMES:
            raise ValueError(
                f"SHOAL_REDIS_URL: expected a {'/'.join(_SCHEMES)}:// URL, got "
                f"{redact_url(value)!r}"
            )
        return value

    @model_validator(mode="after")
    def _credentials(self) -> Self:
        if self.username:
            self.require_secret(
                "password", f"{self.env_name('username')} is set without a password"
            )
        if self.tls_enabled and urlsplit(self.url).scheme == "unix":
            raise ValueError(f"{self.env_name('tls')}: no TLS on a unix:// socket")
        if self.tls_server_name:
            raise ValueError(f"{self.env_name('tls_server_name')}: not supported for Redis")
        parts = urlsplit(self.url)
        if (parts.password or parts.username) and (self.username or self.has_secret("password")):
            raise ValueError(
                f"{self.env_name('url')}: holds credentials and {self.env_name('password')} "
                f"or {self.env_name('username')} is set too; keep one"
            )
        return self

    @property
    def use_tls(self) -> bool:
        return self.tls_enabled or urlsplit(self.url).scheme == "rediss"

    @property
    def prefix(self) -> str:
        """The root of this group's keys, with its trailing colon."""
        return f"shoal:{self.group}:"
