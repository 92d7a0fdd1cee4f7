"""Where the landing zone's table is: a directory or ``s3://bucket/prefix`` on an
S3-compatible store (reached as ``S3Settings`` / the AWS variables say), as delta-rs (and any
Delta reader) reaches it. Handlers, the leader, ``shoal analytics`` and ``shoal up`` all take
the zone as such a string."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from adapters.s3 import S3Location, S3Settings, check_conditional_create

__all__ = [
    "TableAddress",
    "check_zone_store",
    "is_object_store",
    "storage_options",
    "table_address",
]


def is_object_store(location: str | Path) -> bool:
    return str(location).startswith("s3://")


@dataclass(frozen=True, slots=True)
class TableAddress:
    """How delta-rs (and any Delta reader) reaches the zone's table."""

    uri: str
    storage_options: dict[str, str] | None


def table_address(location: str | Path, s3: S3Settings | None = None) -> TableAddress:
    """``ValueError`` for an ``s3://`` URL without a bucket."""
    if is_object_store(location):
        where = S3Location.parse(str(location))
        return TableAddress(str(where), storage_options(s3 or S3Settings()))
    return TableAddress(str(Path(location).absolute()), None)


def storage_options(s3: S3Settings) -> dict[str, str]:
    """delta-rs (object_store) options for the store ``s3`` reaches: only what is set, so the
    AWS variables and the SDK chain fill the rest."""
    options: dict[str, str] = {"timeout": f"{round(s3.request_timeout)}s"}
    if s3.endpoint_url:
        options["AWS_ENDPOINT_URL"] = s3.endpoint_url
        if s3.endpoint_url.startswith("http://"):
            options["AWS_ALLOW_HTTP"] = "true"
    if s3.region:
        options["AWS_REGION"] = s3.region
    elif s3.endpoint_url:
        options["AWS_REGION"] = "us-east-1"  # S3-compatible servers ignore it; the client needs one
    if s3.access_key_id:
        options["AWS_ACCESS_KEY_ID"] = s3.access_key_id
    if s3.secret_access_key is not None:
        options["AWS_SECRET_ACCESS_KEY"] = s3.secret_access_key.get_secret_value()
    style = s3.addressing_style
    if style == "virtual" or (style == "auto" and not s3.endpoint_url):
        options["AWS_VIRTUAL_HOSTED_STYLE_REQUEST"] = "true"
    if not s3.verify_tls:
        options["allow_invalid_certificates"] = "true"
    return options


async def check_zone_store(location: str | Path, s3: S3Settings | None = None) -> None:
    """Before a process writes the zone: on an object store, probe that it refuses a second
    create of one key (``adapters.s3.check_conditional_create``; a store that does not
    would let two commits of one version both land). ``IncompatibleServerError`` naming the
    store when it does not, ``OSError`` when it cannot be reached. Nothing to probe on a
    disk (delta-rs creates a version's entry with a hard link, refused when it exists)."""
    if is_object_store(location):
        await check_conditional_create(s3 or S3Settings(), S3Location.parse(str(location)))
