"""Credentials and TLS shared by the settings of every server connection (etcd, Redis,
NATS, Kafka): the rules live here once.

``ConnectionSecurity`` is the base of ``EtcdSettings``, ``RedisSettings``, ``NatsSettings``
and ``KafkaSettings``. It adds, under each one's prefix (``SHOAL_ETCD_`` ...):

- ``TLS`` (bool), ``TLS_CA_FILE`` (PEM of trusted CAs; unset: the system's), ``TLS_CERT_FILE``
  and ``TLS_KEY_FILE`` (a client certificate and its key, for mutual TLS: both or neither),
  ``TLS_SERVER_NAME`` (the name the server's certificate is checked against, when it is not
  the host connected to). Any TLS file switches TLS on.
- for every secret a subclass names in ``_SECRETS`` (``password``, ``token`` ...): the
  secret itself (``SHOAL_ETCD_PASSWORD``, a ``SecretStr``: never in a repr or a log line)
  or ``..._FILE`` naming a file whose content, stripped, is the secret (how Kubernetes
  mounts a Secret). The file is read when the settings load (to fail at start-up) and
  again at every login (a rotated secret is picked up when the client next logs in:
  reconnects included for NATS, Redis and etcd; new clients for Kafka); never both.

A half-configured connection fails at start-up: the validators raise ``ValueError`` whose
message starts with the environment variable at fault (``SHOAL_ETCD_USER: ...``), which
``services.common.settings.load_settings`` prints as ``error: SHOAL_ETCD_USER: ...``.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar, Self
from urllib.parse import urlsplit, urlunsplit

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import BaseSettings

__all__ = ["ConnectionSecurity", "read_secret_file", "redact_url", "ssl_context"]

log = logging.getLogger("shoal.adapters")


def read_secret_file(path: Path) -> str:
    """The content of ``path``, stripped; ``ValueError`` when unreadable or empty."""
    try:
        value = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read {path}: {exc}") from None
    if not value:
        raise ValueError(f"{path} is empty")
    return value


def ssl_context(
    ca_file: Path | None = None, cert_file: Path | None = None, key_file: Path | None = None
) -> ssl.SSLContext:
    """A client-side context: verifies the server against ``ca_file`` (else the system's
    CAs) and its host name; presents ``cert_file`` + ``key_file`` when given (mutual TLS)."""
    context = ssl.create_default_context(
        ssl.Purpose.SERVER_AUTH, cafile=None if ca_file is None else str(ca_file)
    )
    if cert_file is not None:
        context.load_cert_chain(str(cert_file), None if key_file is None else str(key_file))
    return context


def redact_url(url: str) -> str:
    """``url`` with any password replaced by ``***`` (for log lines and error messages)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{parts.username or ''}:***@{host}"
    if parts.port is not None:
        netloc += f":{parts.port}"
    return urlunsplit(parts._replace(netloc=netloc))


class ConnectionSecurity(BaseSettings):
    """TLS files and file-backed secrets, checked at start-up (see the module doc)."""

    # Names of SecretStr fields that have a "<name>_file" twin (set by each subclass).
    _SECRETS: ClassVar[tuple[str, ...]] = ()

    tls: bool = Field(
        default=False,
        description="`true`: TLS with the system's CAs (any TLS file below switches TLS on too)",
    )
    tls_ca_file: Path | None = Field(
        default=None,
        description="PEM of the CAs that signed the servers' certificates; unset: the system's",
    )
    tls_cert_file: Path | None = Field(
        default=None,
        description="a client certificate for mutual TLS, with its key: both or neither",
    )
    tls_key_file: Path | None = Field(default=None, description="the client certificate's key")
    tls_server_name: str | None = Field(
        default=None,
        description="the name the server's certificate is checked against when it is not "
        "the host connected to (etcd and NATS)",
    )

    def env_name(self, field: str) -> str:
        """The environment variable of ``field`` (``SHOAL_ETCD_PASSWORD_FILE``)."""
        return f"{self.model_config.get('env_prefix', '')}{field}".upper()

    @property
    def tls_enabled(self) -> bool:
        return self.tls or any(
            f is not None for f in (self.tls_ca_file, self.tls_cert_file, self.tls_key_file)
        )

    def ssl_context(self) -> ssl.SSLContext | None:
        """The client TLS context, or None when TLS is off."""
        if not self.tls_enabled:
            return None
        return ssl_context(self.tls_ca_file, self.tls_cert_file, self.tls_key_file)

    def secret(self, name: str) -> str | None:
        """The secret ``name``: its value, else its file's content (read now), else None."""
        value: SecretStr | None = getattr(self, name)
        if value is not None:
            return value.get_secret_value()
        path: Path | None = getattr(self, f"{name}_file")
        return None if path is None else read_secret_file(path)

    def secret_reader(self, name: str) -> Callable[[], str]:
        """A callable giving the secret ``name`` at each call: a file is read again (so a
        rotated Kubernetes Secret is picked up at the next login); when that read fails (the
        file is being replaced), the last value read."""
        last = self.secret(name) or ""

        def read() -> str:
            nonlocal last
            try:
                last = self.secret(name) or last
            except ValueError as exc:
                log.warning("%s: %s; using the value read before", self.env_name(name), exc)
            return last

        return read

    def has_secret(self, name: str) -> bool:
        return getattr(self, name) is not None or getattr(self, f"{name}_file") is not None

    @model_validator(mode="after")
    def _security_consistent(self) -> Self:
        for field in ("tls_ca_file", "tls_cert_file", "tls_key_file"):
            path: Path | None = getattr(self, field)
            if path is not None and not path.is_file():
                raise ValueError(f"{self.env_name(field)}: {path} is not a readable file")
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise ValueError(
                f"{self.env_name('tls_cert_file')} and {self.env_name('tls_key_file')}: "
                "a client certificate needs its key, and a key its certificate"
            )
        for name in self._SECRETS:
            value: SecretStr | None = getattr(self, name)
            path = getattr(self, f"{name}_file")
            if value is not None and path is not None:
                raise ValueError(
                    f"{self.env_name(name)}: set both it and {self.env_name(name + '_file')}; "
                    "keep one"
                )
            if value is not None and not value.get_secret_value():
                raise ValueError(f"{self.env_name(name)}: empty")
            if path is not None:
                try:
                    read_secret_file(path)
                except ValueError as exc:
                    raise ValueError(f"{self.env_name(name + '_file')}: {exc}") from None
        return self

    def require_pair(self, user_field: str, secret: str) -> None:
        """A user needs its password (``secret``) and a password needs its user."""
        if getattr(self, user_field):
            self.require_secret(secret, f"{self.env_name(user_field)} is set without a password")
        elif self.has_secret(secret):
            raise ValueError(f"{self.env_name(user_field)}: a password is set without a user")

    def require_secret(self, name: str, because: str) -> None:
        """``ValueError`` naming both variables unless the secret ``name`` is configured."""
        if not self.has_secret(name):
            raise ValueError(
                f"{because}: set {self.env_name(name)} or {self.env_name(name + '_file')}"
            )
