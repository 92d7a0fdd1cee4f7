"""The object-store probe (``adapters.s3.check_conditional_create``): a store that honours
``If-None-Match: *`` passes; one that ignores it (MinIO behind a proxy that strips the
header, in a bucket anyone may write) is refused, and a handler and a leader started
against it exit with one ``error:`` line naming the store, having landed nothing."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import urlsplit

import anyio
import pytest

from adapters.s3 import S3Location, S3Settings, check_conditional_create
from core.errors import IncompatibleServerError
from infra.local._testservers import ServerInfo
from tests.contract._s3 import fresh_bucket, s3_env, settings_for
from tests.contract._stripping_proxy import HeaderStrippingProxy

pytestmark = pytest.mark.anyio

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
async def careless_store(
    minio_server: ServerInfo,
) -> AsyncIterator[tuple[S3Settings, S3Location, HeaderStrippingProxy]]:
    """A store that ignores conditional writes: settings that reach MinIO through the
    stripping proxy, a bucket anyone may write, and the proxy."""
    client, location = fresh_bucket(minio_server)
    client.put_bucket_policy(
        Bucket=location.bucket,
        Policy=json.dumps(
            {
                "Version": "2012-10-17",
                "Statement": [
                    {
                        "Effect": "Allow",
                        "Principal": {"AWS": ["*"]},
                        "Action": ["s3:GetObject", "s3:PutObject", "s3:DeleteObject"],
                        "Resource": [f"arn:aws:s3:::{location.bucket}/*"],
                    }
                ],
            }
        ),
    )
    endpoint = urlsplit(minio_server.url)
    assert endpoint.hostname is not None and endpoint.port is not None
    proxy = HeaderStrippingProxy(
        endpoint.hostname, endpoint.port, {"if-none-match", "authorization"}
    )
    async with anyio.create_task_group() as tg:
        await tg.start(proxy.serve)
        settings = settings_for(minio_server).model_copy(
            update={"endpoint_url": f"http://127.0.0.1:{proxy.port}"}
        )
        yield settings, location, proxy
        tg.cancel_scope.cancel()


async def test_a_store_that_refuses_a_second_create_passes(minio_server: ServerInfo) -> None:
    _, location = fresh_bucket(minio_server)
    await check_conditional_create(settings_for(minio_server), location)


async def test_a_store_that_ignores_if_none_match_is_refused(
    careless_store: tuple[S3Settings, S3Location, HeaderStrippingProxy], minio_server: ServerInfo
) -> None:
    settings, location, proxy = careless_store
    with pytest.raises(IncompatibleServerError, match=r"If-None-Match: \* ignored") as refused:
        await check_conditional_create(settings, location)
    assert settings.endpoint_url is not None and settings.endpoint_url in str(refused.value)
    assert proxy.stripped >= 2, "the probe's conditional puts went through the proxy"
    client, _ = fresh_bucket(minio_server)
    left = client.list_objects_v2(Bucket=location.bucket, Prefix=location.key("_shoal_probe/"))
    assert left.get("KeyCount", 0) == 0, "the probe object is deleted"


@pytest.mark.parametrize("role", ["handler", "leader"])
async def test_a_service_against_such_a_store_exits_with_one_error_line(
    careless_store: tuple[S3Settings, S3Location, HeaderStrippingProxy],
    minio_server: ServerInfo,
    role: str,
) -> None:
    settings, location, _ = careless_store
    assert settings.endpoint_url is not None
    zone = f"s3://{location.bucket}/{location.prefix}"
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("SHOAL_")},
        **s3_env(minio_server),
        "SHOAL_S3_ENDPOINT_URL": settings.endpoint_url,
        # Nothing else is reachable: the probe comes before any other connection.
        "SHOAL_NATS_URL": "nats://127.0.0.1:1",
        "SHOAL_HANDLER_DATA_DIR": zone,
        "SHOAL_LEADER_DATA_DIR": zone,
    }
    done = await anyio.run_process(
        [sys.executable, "-m", f"services.{role}"], cwd=REPO, env=env, check=False
    )
    lines = done.stderr.decode().strip().splitlines()
    assert done.returncode != 0
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    assert settings.endpoint_url in lines[0] and "If-None-Match" in lines[0]
    client, _ = fresh_bucket(minio_server)
    listed = client.list_objects_v2(Bucket=location.bucket)
    assert listed.get("KeyCount", 0) == 0, "nothing was written: no table, no probe object"
