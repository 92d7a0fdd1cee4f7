"""``EtcdSettings``: where etcd is, how to log in and how long to wait for it (env prefix
``SHOAL_ETCD_``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, ClassVar, Self

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import NoDecode, SettingsConfigDict

from adapters._credentials import ConnectionSecurity
from adapters._store_settings import StoreTiming


class EtcdSettings(StoreTiming, ConnectionSecurity):
    """Connection and timing settings shared by every etcd adapter.

    ``endpoints`` accepts ``host:port`` strings; from the environment, a comma-separated
    list (``SHOAL_ETCD_ENDPOINTS=10.0.0.1:2379,10.0.0.2:2379``). Every key lives under
    ``/shoal/{group}``.

    Credentials: ``user`` with ``password`` (or ``password_file``): the client
    authenticates on connect and again whenever etcd says its token is no longer valid.
    TLS (``tls``, ``tls_ca_file``, ``tls_cert_file``/``tls_key_file``, ``tls_server_name``,
    see ``adapters._credentials``): gRPC needs the CA file.
    """

    _SECRETS: ClassVar[tuple[str, ...]] = ("password",)

    model_config = SettingsConfigDict(env_prefix="SHOAL_ETCD_", extra="ignore", frozen=True)

    endpoints: Annotated[tuple[str, ...], NoDecode] = Field(
        default=("127.0.0.1:2379",),
        description="comma-separated `host:port` (at least one); every key lives under "
        "`/shoal/{group}`",
    )
    user: str | None = Field(
        default=None,
        description="an etcd user: the client logs in on first use and again whenever etcd "
        "says its token is no longer valid (token TTL, etcd restart); needs its password",
    )
    password: SecretStr | None = Field(default=None, description="the user's password")
    password_file: Path | None = None

    @field_validator("endpoints", mode="before")
    @classmethod
    def _split_endpoints(cls, value: object) -> object:
        if isinstance(value, str):
            value = tuple(part.strip() for part in value.split(",") if part.strip())
        if isinstance(value, list | tuple) and not value:
            raise ValueError("SHOAL_ETCD_ENDPOINTS: at least one host:port is needed")
        return value

    @model_validator(mode="after")
    def _credentials(self) -> Self:
        self.require_pair("user", "password")
        if self.tls_enabled and self.tls_ca_file is None:
            raise ValueError(
                f"{self.env_name('tls_ca_file')}: etcd over TLS needs the CA file (gRPC)"
            )
        return self

    @property
    def prefix(self) -> str:
        """The root of this group's keys, without a trailing slash."""
        return f"/shoal/{self.group}"
