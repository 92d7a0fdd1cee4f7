"""`shoal up --coordination C --transport T`, black box, for every backend pair: it starts the
pair's servers, says which pair runs (its printed line and the leader's status document),
lands what is posted with its API key, and on Ctrl-C exits 0 within its stop bound with no
process left behind (its Kafka and Redis included)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import anyio
import httpx
import pytest

from infra.local.servers import free_port
from services.cli.devices import LoadGenerator, LoadPlan
from services.common.backends import COORDINATION_BACKENDS
from services.common.settings import TRANSPORT_BACKENDS
from tests._processes import alive, descendants
from tests.e2e._landed import landed_ids, read_landed

pytestmark = pytest.mark.e2e

STOP_BOUND = 15.0  # services.cli._up.STOP_BOUND: everything is gone this long after Ctrl-C
READY_WITHIN = 150.0  # Kafka's start, then leaders, handlers and the gateway (2 busy CPUs)
LAND_WITHIN = 60.0
MESSAGES = 300

PAIRS = [
    pytest.param(c, t, id=f"{c}+{t}") for c in COORDINATION_BACKENDS for t in TRANSPORT_BACKENDS
]
Start = Callable[..., "subprocess.Popen[str]"]
_LINE = re.compile(r"(backends|gateway|api key|dashboard|data): (.+)\n")


def _env(tmp_path: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """Ours without the session's SHOAL_* settings; the stack's state file in ``tmp_path``."""
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith("SHOAL_")},
        "SHOAL_STATE_DIR": str(tmp_path / "state"),
        **(extra or {}),
    }


def _read_lines(process: subprocess.Popen[str], errors: Path) -> dict[str, str]:
    """The lines `shoal up` prints once its stack is ready (it prints them all at once)."""
    assert process.stdout is not None
    lines: dict[str, str] = {}
    deadline = time.monotonic() + READY_WITHIN
    while len(lines) < 5 and time.monotonic() < deadline:
        line = process.stdout.readline()  # the stack's own bound (90 s) ends it before ours
        if not line:
            break
        if match := _LINE.fullmatch(line):
            lines[match[1]] = match[2]
    assert len(lines) == 5, f"shoal up printed {lines}; stderr: {errors.read_text()[-3000:]}"
    return lines


def _stop(process: subprocess.Popen[str], family: set[int]) -> tuple[int, float, set[int]]:
    """Ctrl-C: the exit code, the seconds it took, and the processes still running."""
    family |= descendants(process.pid)
    started = time.monotonic()
    process.send_signal(signal.SIGINT)
    try:
        code = process.wait(timeout=STOP_BOUND + 15)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    return code, time.monotonic() - started, alive(family)


@pytest.fixture
def start_up(tmp_path: Path) -> Iterator[Start]:
    """``start_up(*args)``: `shoal up ARGS` in ``tmp_path``, its stderr in ``up.err``. One the
    test left running (a failed assertion) is stopped, and whatever it runs."""
    running: list[subprocess.Popen[str]] = []

    def start(*args: str, env: Mapping[str, str] | None = None) -> subprocess.Popen[str]:
        with (tmp_path / "up.err").open("w") as errors:
            process = subprocess.Popen(
                [sys.executable, "-m", "services.cli.main", "up", *args],
                env=_env(tmp_path, env),
                cwd=tmp_path,
                stdout=subprocess.PIPE,
                stderr=errors,
                text=True,
            )
        running.append(process)
        return process

    yield start
    for process in running:
        if process.poll() is None:
            _stop(process, set())
        if process.stdout is not None:
            process.stdout.close()


async def _post(gateway: str, api_key: str) -> set[str]:
    """MESSAGES messages through the gateway with the printed key; their accepted ids."""
    generator = LoadGenerator(
        gateway,
        LoadPlan(messages=MESSAGES, projects=20, batch=25, concurrency=4, keep_ids=True),
        api_key=api_key,
    )
    summary = await generator.run()
    assert summary.accepted_count == MESSAGES, summary
    return set(summary.accepted)


@pytest.mark.parametrize(("coordination", "transport"), PAIRS)
def test_shoal_up_runs_and_stops_on_the_pair(
    start_up: Start, tmp_path: Path, coordination: str, transport: str
) -> None:
    data = tmp_path / "data"
    process = start_up(
        "--coordination",
        coordination,
        "--transport",
        transport,
        "--handlers",
        "2",
        "--partitions",
        "16",
        "--no-simulator",
        "--duration",
        "600",  # a bound should the test not stop it; it sends Ctrl-C long before
        "--gateway-port",
        str(free_port()),
        "--dashboard-port",
        str(free_port()),
        "--data-dir",
        str(data),
    )
    lines = _read_lines(process, tmp_path / "up.err")
    family = descendants(process.pid)
    assert lines["backends"] == f"coordination={coordination} transport={transport}"
    assert lines["data"] == str(data)
    status = httpx.get(f"{lines['dashboard']}status", timeout=5, trust_env=False).json()
    assert status["backends"] == {"coordination": coordination, "transport": transport}

    accepted = anyio.run(_post, lines["gateway"], lines["api key"])
    deadline = time.monotonic() + LAND_WITHIN
    while not accepted <= set(landed := landed_ids(read_landed(data))):
        assert time.monotonic() < deadline, (
            f"{len(accepted - set(landed))} of {MESSAGES} messages not landed in {LAND_WITHIN} s"
        )
        time.sleep(0.5)  # the handlers are other processes: the zone is polled
    assert max(landed.values()) == 1, "a message landed twice"
    # `shoal dlq` finds the pair's broker through the state file.
    dlq = subprocess.run(
        [sys.executable, "-m", "services.cli.main", "dlq", "list", "--json"],
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (dlq.returncode, dlq.stdout) == (0, ""), dlq.stderr

    code, took, left = _stop(process, family)
    print(f"\nUP {coordination}+{transport}: stopped in {took:.1f} s, exit {code}, left {left}")
    assert code == 0, (tmp_path / "up.err").read_text()[-3000:]
    assert took <= STOP_BOUND
    assert not left, f"processes left behind: {left}"


def _running_under(directory: Path) -> set[int]:
    """The processes whose command line names ``directory`` (a server's data dir, say)."""
    found = set()
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and str(directory) in (entry / "cmdline").read_text():
                found.add(int(entry.name))
        except OSError:
            continue
    return alive(found)


def test_a_pair_whose_server_does_not_start_ends_with_one_error_line(
    start_up: Start, tmp_path: Path
) -> None:
    """etcd starts, then the transport's nats-server exits at once: one `error:` line says
    which and why, and etcd is stopped again."""
    fake = tmp_path / "nats-server"
    fake.write_text(
        '#!/bin/sh\n[ "$1" = --version ] && { echo "nats-server: v2.15.1"; exit 0; }\n'
        'echo "cannot listen" >&2\nexit 1\n'
    )
    fake.chmod(0o755)
    process = start_up(
        "--coordination", "etcd", "--transport", "nats", env={"SHOAL_NATS_SERVER": str(fake)}
    )
    assert process.wait(timeout=60) != 0
    errors = (tmp_path / "up.err").read_text().strip().splitlines()
    assert errors[-1].startswith("error: nats (the transport) did not start: "), errors
    assert list(tmp_path.glob("var/up/*/_run/etcd/etcd.log")), "etcd was not started first"
    assert not _running_under(tmp_path), "a server outlived shoal up"


def test_an_unknown_backend_is_a_usage_error(start_up: Start) -> None:
    process = start_up("--coordination", "zookeeper")
    assert process.wait(timeout=30) == 2
