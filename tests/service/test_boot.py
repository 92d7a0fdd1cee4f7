"""A service whose backend is missing or refuses says so in one line and exits 1; one that
must not start as configured (a gateway without API keys, a consumption mode that cannot
run) says so in one line and exits 2, before it connects to anything."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from infra.local.servers import free_port

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("service", ["gateway", "handler"])
def test_a_missing_broker_is_one_error_line_and_exit_1(service: str, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHOAL_")}
    env |= {
        "SHOAL_NATS_URL": f"nats://127.0.0.1:{free_port()}",
        "SHOAL_NATS_CONNECT_TIMEOUT": "1",
        "SHOAL_ETCD_ENDPOINTS": f"127.0.0.1:{free_port()}",
        "SHOAL_GATEWAY_PORT": str(free_port()),
        "SHOAL_GATEWAY_LEDGER_DIR": str(tmp_path / "ledger"),
        "SHOAL_GATEWAY_ALLOW_ANONYMOUS": "true",  # what is checked is the broker
        "SHOAL_HANDLER_DATA_DIR": str(tmp_path / "data"),
    }
    done = subprocess.run(
        [sys.executable, "-m", f"services.{service}"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1, done.stderr[-2000:]
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    assert done.stderr.strip().splitlines()[-1].startswith("error: ")


@pytest.mark.parametrize(
    ("service", "settings", "says"),
    [
        (
            "gateway",
            {"SHOAL_CONSUMPTION_MODE": "shared", "SHOAL_STRATEGY": "fan-out"}
            | {"SHOAL_TRANSPORT": "kafka"},
            "KIP-932",
        ),
        (
            "handler",
            {"SHOAL_CONSUMPTION_MODE": "broadcast", "SHOAL_STRATEGY": "broadcast"},
            "SHOAL_HANDLER_ID",
        ),
        (
            "handler",
            {"SHOAL_CONSUMPTION_MODE": "broadcast", "SHOAL_STRATEGY": "broadcast"}
            | {"SHOAL_HANDLER_ID": "copy-a", "SHOAL_NATS_RETENTION": "workqueue"},
            "SHOAL_NATS_RETENTION=limits",
        ),
        (
            "leader",
            {"SHOAL_CONSUMPTION_MODE": "broadcast", "SHOAL_STRATEGY": "broadcast"}
            | {"SHOAL_SCALING_SCALER": "local"},
            "SHOAL_SCALING_SCALER=none",
        ),
    ],
)
def test_a_consumption_mode_that_cannot_run_is_refused_before_connecting_with_exit_2(
    service: str, settings: dict[str, str], says: str, tmp_path: Path
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHOAL_")}
    env |= {
        # nothing listens here: a service that got as far as connecting would exit 1
        "SHOAL_NATS_URL": f"nats://127.0.0.1:{free_port()}",
        "SHOAL_NATS_CONNECT_TIMEOUT": "1",
        "SHOAL_ETCD_ENDPOINTS": f"127.0.0.1:{free_port()}",
        "SHOAL_KAFKA_BOOTSTRAP_SERVERS": f"127.0.0.1:{free_port()}",
        "SHOAL_HANDLER_DATA_DIR": str(tmp_path / "data"),
        "SHOAL_LEADER_PORT": str(free_port()),
        **settings,
    }
    done = subprocess.run(
        [sys.executable, "-m", f"services.{service}"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    assert says in done.stderr, done.stderr[-2000:]


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_a_gateway_without_keys_or_the_opt_in_exits_2_with_one_error_line(
    log_format: str,
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHOAL_")}
    env |= {
        "SHOAL_LOG_FORMAT": log_format,
        "SHOAL_GATEWAY_PORT": str(free_port()),
        # nothing listens here: a gateway that got as far as connecting would exit 1
        "SHOAL_NATS_URL": f"nats://127.0.0.1:{free_port()}",
        "SHOAL_NATS_CONNECT_TIMEOUT": "1",
    }
    done = subprocess.run(
        [sys.executable, "-m", "services.gateway"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stdout == ""
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("error: SHOAL_GATEWAY_API_KEYS_FILE is unset"), line
    assert "SHOAL_GATEWAY_ALLOW_ANONYMOUS=true" in line, line
