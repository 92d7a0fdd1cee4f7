"""Whether an object store refuses the second of two creates of one key.

A Delta commit of version ``n`` on an object store is a ``PUT _delta_log/n.json`` with
``If-None-Match: *``: of two writers that both plan version ``n``, the store must store
one and refuse the other (412). A store that ignores the header (an old S3-compatible
server, a proxy that strips it) stores both: the one overwritten has already acked, and
its rows are gone from the table without a trace. Nothing in a commit's answer tells the
two apart, so a handler and a leader probe the store before they start: a probe object,
put twice with the header, must be refused the second time (``conditional_create_problem``).

The probe object lives under the zone's ``_shoal_probe/`` (a top-level ``_`` folder, which
Delta readers and vacuum skip) and is deleted after. The probe runs in a child process
(``python -m adapters.s3._probe``, its settings on stdin, not in a process listing), so a
leader that otherwise never imports boto3 does not keep it."""

from __future__ import annotations

import contextlib
import json
import sys
import uuid
from typing import Any

import anyio

from adapters.s3._location import S3Location
from adapters.s3._settings import S3Settings
from core.errors import IncompatibleServerError

__all__ = ["PROBE_FOLDER", "check_conditional_create", "conditional_create_problem"]

PROBE_FOLDER = "_shoal_probe"
_REFUSED_STATUSES = {"412", "409"}  # PreconditionFailed; ConditionalRequestConflict (AWS)
_ERROR_CHARS = 500


def conditional_create_problem(client: Any, location: S3Location) -> str | None:
    """None when the store behind ``client`` refuses a second create of one key at
    ``location``, else what is wrong (the first create refused, or the second stored).
    Blocking."""
    from botocore.exceptions import ClientError  # noqa: PLC0415 (boto3, in the child only)

    key = location.key(f"{PROBE_FOLDER}/{uuid.uuid4().hex}")
    where = f"s3://{location.bucket}/{key}"
    try:
        try:
            client.put_object(Bucket=location.bucket, Key=key, Body=b"1", IfNoneMatch="*")
        except ClientError as exc:
            return f"a conditional create of {where} was refused: {exc}"
        try:
            client.put_object(Bucket=location.bucket, Key=key, Body=b"2", IfNoneMatch="*")
        except ClientError as exc:
            status = str(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", ""))
            if status in _REFUSED_STATUSES:
                return None
            return f"the second create of {where} failed, not as a refusal: {exc}"
        return (
            f"the store stored a second create of {where} (If-None-Match: * ignored): two "
            "writers could both commit one table version and one of them would lose acked "
            "rows; use a store that honours conditional writes"
        )
    finally:
        with contextlib.suppress(ClientError):  # under _shoal_probe/: no reader sees it
            client.delete_object(Bucket=location.bucket, Key=key)


async def check_conditional_create(settings: S3Settings, location: S3Location) -> None:
    """Probe the store (see the module's docstring) in a child process. Raises
    ``IncompatibleServerError`` naming the store when it does not refuse a second create,
    ``OSError`` when the probe cannot run (the store unreachable)."""
    secret = settings.secret_access_key
    request = {
        "settings": {
            **settings.model_dump(exclude={"secret_access_key"}),
            "secret_access_key": None if secret is None else secret.get_secret_value(),
        },
        "location": str(location),
    }
    done = await anyio.run_process(
        [sys.executable, "-m", __name__], input=json.dumps(request).encode(), check=False
    )
    store = settings.endpoint_url or "AWS S3"
    if done.returncode == 2:
        raise IncompatibleServerError(f"object store {store}: {done.stdout.decode().strip()}")
    if done.returncode != 0:
        error = " ".join(done.stderr.decode(errors="replace").split()) or "no output"
        raise OSError(f"object store {store}: the probe failed: {error[:_ERROR_CHARS]}")


def main() -> int:
    from adapters.s3.client import s3_client  # noqa: PLC0415 (boto3, in the child only)

    request = json.load(sys.stdin)
    settings = S3Settings.model_validate(request["settings"])
    try:
        problem = conditional_create_problem(
            s3_client(settings), S3Location.parse(request["location"])
        )
    except Exception as exc:  # any: the parent reports it, with its type
        print(f"{type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    if problem is None:
        return 0
    print(problem)
    return 2


if __name__ == "__main__":
    sys.exit(main())
