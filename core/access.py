"""Who may write which project, and how fast: API keys and a per-key token bucket.

A key is shown once, as ``shoal_{key_id}_{secret}``; only the SHA-256 of the secret is
stored. The secret carries 256 random bits, so a fast hash is as strong as a slow one here
(a guess is a 2^-256 shot), and checking a request costs microseconds. ``key_id`` is public:
it names the key in ``shoal keys list`` and in logs.

Pure: the caller passes the random parts, the clock reading and the stored keys.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from core.errors import ShoalError
from core.messages import PROJECT_ID_PATTERN, is_valid_project_id

__all__ = [
    "KEY_ID_PATTERN",
    "TOKEN_PREFIX",
    "AccessDeniedError",
    "ApiKey",
    "TokenBucket",
    "authenticate",
    "authorize",
    "hash_secret",
    "issue_key",
    "take",
]

TOKEN_PREFIX = "shoal"
KEY_ID_PATTERN = re.compile(r"[0-9a-f]{12}")
_SECRET_PATTERN = re.compile(r"[A-Za-z0-9_-]{32,128}")
_LABEL_MAX = 200


class AccessDeniedError(ShoalError, PermissionError):
    """The request may not write: ``status`` is 401 (no valid key) or 403 (not its project)."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True, slots=True)
class ApiKey:
    """A stored key: never the secret, only its hash.

    ``projects`` None means every project (an admin key). ``rate`` (requests per second,
    with a burst of twice that) overrides the gateway's default limit for this key.
    """

    key_id: str
    secret_sha256: str
    projects: frozenset[str] | None
    created_at: float
    label: str = ""
    revoked_at: float | None = None
    rate: float | None = None

    def __post_init__(self) -> None:
        if not KEY_ID_PATTERN.fullmatch(self.key_id):
            raise ValueError(f"key id {self.key_id!r} must be 12 lowercase hex characters")
        if not re.fullmatch(r"[0-9a-f]{64}", self.secret_sha256):
            raise ValueError("secret_sha256 must be 64 lowercase hex characters")
        if self.projects is not None:
            if not self.projects:
                raise ValueError("a key names at least one project, or every project")
            bad = sorted(p for p in self.projects if not is_valid_project_id(p))
            if bad:
                raise ValueError(f"project ids {bad[:3]} must match {PROJECT_ID_PATTERN.pattern}")
        if len(self.label) > _LABEL_MAX:
            raise ValueError(f"label is over {_LABEL_MAX} characters")
        if self.rate is not None and not (math.isfinite(self.rate) and self.rate > 0):
            raise ValueError(f"rate {self.rate} must be a positive number of requests/s")

    @property
    def admin(self) -> bool:
        return self.projects is None

    @property
    def revoked(self) -> bool:
        return self.revoked_at is not None


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def issue_key(
    key_id: str,
    secret: str,
    *,
    projects: Collection[str] | None,
    created_at: float,
    label: str = "",
    rate: float | None = None,
) -> tuple[str, ApiKey]:
    """The token to hand out once and the record to store. ``key_id`` (12 hex) and
    ``secret`` (32+ URL-safe characters) come from a secure random source."""
    if not _SECRET_PATTERN.fullmatch(secret):
        raise ValueError("secret must be 32 to 128 URL-safe characters")
    record = ApiKey(
        key_id=key_id,
        secret_sha256=hash_secret(secret),
        projects=None if projects is None else frozenset(projects),
        created_at=created_at,
        label=label,
        rate=rate,
    )
    return f"{TOKEN_PREFIX}_{key_id}_{secret}", record


_UNAUTHENTICATED = 401
_FORBIDDEN = 403


def authenticate(authorization: str | None, keys: Mapping[str, ApiKey]) -> ApiKey:
    """The key an ``Authorization: Bearer shoal_...`` header proves, else 401 saying why."""
    if authorization is None or not authorization.strip():
        raise AccessDeniedError(
            "missing API key: send 'Authorization: Bearer <key>'", _UNAUTHENTICATED
        )
    scheme, _, token = authorization.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise AccessDeniedError("the Authorization header must be 'Bearer <key>'", _UNAUTHENTICATED)
    prefix, _, rest = token.strip().partition("_")
    key_id, _, secret = rest.partition("_")
    if prefix != TOKEN_PREFIX or not KEY_ID_PATTERN.fullmatch(key_id) or not secret:
        raise AccessDeniedError(
            f"not a shoal API key (they look like {TOKEN_PREFIX}_<12 hex>_<secret>)",
            _UNAUTHENTICATED,
        )
    record = keys.get(key_id)
    # One answer for an unknown id and a wrong secret: the id alone says nothing. A secret
    # no key could have (say a lone surrogate, which has no UTF-8) is just a wrong one.
    if (
        record is None
        or not _SECRET_PATTERN.fullmatch(secret)
        or not hmac.compare_digest(record.secret_sha256, hash_secret(secret))
    ):
        raise AccessDeniedError("invalid API key", _UNAUTHENTICATED)
    if record.revoked:
        raise AccessDeniedError(f"API key {key_id} was revoked", _UNAUTHENTICATED)
    return record


def authorize(key: ApiKey, project_id: str) -> None:
    """403 unless ``key`` may write ``project_id``."""
    if key.projects is not None and project_id not in key.projects:
        raise AccessDeniedError(
            f"API key {key.key_id} may not write project {project_id!r}", _FORBIDDEN
        )


@dataclass(frozen=True, slots=True)
class TokenBucket:
    """``tokens`` left at ``updated_at``; it refills at ``rate`` per second up to ``burst``."""

    tokens: float
    updated_at: float


def take(
    bucket: TokenBucket | None, now: float, *, rate: float, burst: float
) -> tuple[TokenBucket, float | None]:
    """Spend one token: the new bucket, and None when allowed, else the seconds until a
    token is back (the Retry-After). A refused request spends nothing. ``burst`` is at
    least 1 (a bucket that cannot hold one token admits nothing, ever)."""
    if burst < 1 or rate <= 0:
        raise ValueError(f"burst {burst} must be >= 1 and rate {rate} > 0")
    if bucket is None:
        tokens = burst
    else:
        elapsed = max(0.0, now - bucket.updated_at)  # a clock step back refills nothing
        tokens = min(burst, bucket.tokens + elapsed * rate)
    if tokens >= 1.0:
        return TokenBucket(tokens - 1.0, now), None
    return TokenBucket(tokens, now), (1.0 - tokens) / rate
