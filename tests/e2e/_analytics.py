"""``shoal analytics`` run as an operator would, on a cluster's landing zone."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

from tests.e2e._cluster import Cluster

__all__ = ["run_audit", "run_cli"]


def run_audit(cluster: Cluster) -> dict[str, Any]:
    """``shoal analytics audit ZONE --drain-marker --ledger LEDGER --dead-letters --json``
    (the dead letters read from the cluster's transport)."""
    return run_cli(
        cluster,
        "audit",
        "--drain-marker",
        "--ledger",
        str(cluster.data_dir / "_ledger"),
        "--dead-letters",
    )


def run_cli(cluster: Cluster, command: str, *options: str) -> dict[str, Any]:
    """``shoal analytics COMMAND ZONE OPTIONS --json`` in a subprocess (with the cluster's
    SHOAL_S3_* settings when the zone is on S3): its JSON, once it exits 0."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "services.cli.main",
            "analytics",
            command,
            str(cluster.zone),
            *options,
            "--json",
        ],
        env={
            **os.environ,
            **cluster.settings_env(),
            **cluster.extra_env,
            "SHOAL_STATE_DIR": str(cluster.work_dir / "state"),
        },
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, f"{command} exited {done.returncode}: {done.stderr[-2000:]}"
    result: dict[str, Any] = json.loads(done.stdout)
    return result
