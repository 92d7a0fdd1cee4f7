"""`shoal up --data-dir s3://bucket/prefix`, black box, as a user runs it: against the store
the environment names, and with no store configured (then `shoal up` starts a MinIO of its
own). Messages land in the bucket's Delta table, exactly once, and the run ends cleanly with
a final line that counts them all."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from infra.local._testservers import ServerInfo
from services.common.table import landed_summary, read_landed
from tests.contract._s3 import fresh_bucket, s3_env, settings_for

pytestmark = pytest.mark.e2e

DURATION = 25

_FINAL = re.compile(r"stopped: accepted ([\d,]+)  landed ([\d,]+)  table (\S+) \(version (\d+)\)")


def _up(zone: str, tmp_path: Path, env: dict[str, str]) -> tuple[dict[str, str], str]:
    """Run `shoal up` for DURATION seconds; its URL lines (and ``accepted``, ``landed``,
    ``table`` and ``version`` from its final line) and its stderr."""
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
    final = _FINAL.fullmatch(done.stdout.splitlines()[-1])
    assert final, f"no final line at the end of: {done.stdout[-2000:]}"
    accepted, landed, table, version = final.groups()
    lines |= {
        "accepted": accepted.replace(",", ""),
        "landed": landed.replace(",", ""),
        "table": table,
        "version": version,
    }
    return lines, done.stderr


def test_shoal_up_lands_in_the_bucket_the_environment_names(
    minio_server: ServerInfo, tmp_path: Path
) -> None:
    _, location = fresh_bucket(minio_server)
    zone = f"s3://{location.bucket}/landing"
    lines, _ = _up(zone, tmp_path, s3_env(minio_server))
    assert lines["data"] == zone and lines["s3"] == minio_server.url
    settings = settings_for(minio_server)
    ids = Counter(read_landed(zone, settings, columns=["message_id"]).column(0).to_pylist())
    assert sum(ids.values()) > DURATION * 200 // 4, "too little was committed to the bucket"
    assert max(ids.values()) == 1, "a message landed twice"
    # The final line comes once the handlers drained: all that was accepted had landed.
    assert int(lines["landed"]) == int(lines["accepted"]) == sum(ids.values())
    assert lines["table"] == zone
    assert int(lines["version"]) == landed_summary(zone, settings).version


def test_shoal_up_starts_a_minio_of_its_own_when_no_store_is_configured(tmp_path: Path) -> None:
    lines, errors = _up("s3://shoal/landing", tmp_path, {})
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+ \(MinIO; key \S+\)", lines["s3"]), lines
    landed = [int(n.replace(",", "")) for n in re.findall(r"landed\s+([\d,]+)", errors)]
    assert landed and landed[-1] > 0, f"no row landed: {errors[-2000:]}"
    assert int(lines["landed"]) == int(lines["accepted"]) >= landed[-1]
    assert lines["table"] == "s3://shoal/landing"
