"""`shoal up --data-dir s3://bucket/prefix`, black box, as a user runs it: against the store
the environment names, and with no store configured (then `shoal up` starts a MinIO of its
own). Messages land in the bucket, exactly once, and the run ends cleanly."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from adapters.s3 import S3Location, s3_client
from infra.local._testservers import ServerInfo
from services.common.table import read_table
from tests.contract._s3 import fresh_bucket, s3_env, settings_for

pytestmark = pytest.mark.e2e

DURATION = 25


def _up(zone: str, tmp_path: Path, env: dict[str, str]) -> tuple[dict[str, str], str]:
    """Run `shoal up` for DURATION seconds; its URL lines and its stderr."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "services.cli.main",
            "up",
            "--handlers",
            "2",
            "--rate",
            "200",
            "--duration",
            str(DURATION),
            "--data-dir",
            zone,
        ],
        env={
            **{k: v for k, v in os.environ.items() if not k.startswith(("SHOAL_", "AWS_"))},
            "SHOAL_STATE_DIR": str(tmp_path / "state"),
            **env,
        },
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=DURATION + 150,
        check=False,
    )
    assert done.returncode == 0, f"shoal up exited {done.returncode}: {done.stderr[-3000:]}"
    lines = dict(re.findall(r"^(gateway|dashboard|data|s3): (.+)$", done.stdout, re.MULTILINE))
    return lines, done.stderr


def test_shoal_up_lands_in_the_bucket_the_environment_names(
    minio_server: ServerInfo, tmp_path: Path
) -> None:
    _, location = fresh_bucket(minio_server)
    zone = f"s3://{location.bucket}/landing"
    lines, _ = _up(zone, tmp_path, s3_env(minio_server))
    assert lines["data"] == zone and lines["s3"] == minio_server.url
    state = read_table(zone, settings_for(minio_server))
    assert state.files, "nothing was committed to the bucket"
    client = s3_client(settings_for(minio_server))
    where = S3Location.parse(zone)
    ids: Counter[str] = Counter()
    for path in state.files:
        body = client.get_object(Bucket=where.bucket, Key=where.key(path))["Body"].read()
        table = pq.read_table(pa.BufferReader(body), columns=["message_id"])
        ids.update(table.column(0).to_pylist())
    assert sum(ids.values()) == state.rows() > DURATION * 200 // 4
    assert max(ids.values()) == 1, "a message landed twice"


def test_shoal_up_starts_a_minio_of_its_own_when_no_store_is_configured(tmp_path: Path) -> None:
    lines, errors = _up("s3://shoal/landing", tmp_path, {})
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+ \(MinIO; key \S+\)", lines["s3"]), lines
    landed = [int(n.replace(",", "")) for n in re.findall(r"landed\s+([\d,]+)", errors)]
    assert landed and landed[-1] > 0, f"no row landed: {errors[-2000:]}"
