"""What a user of `shoal up` sees, black box, without a terminal (as in CI): with
`--no-simulator` and another client posting to its gateway, the progress lines count what
the gateway accepted and show a landing rate that stays above 0 between rolls while the
client posts; after Ctrl-C, once the handlers drained, one final line gives the counts, the
table's path and its Delta version."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest

from infra.local.servers import free_port
from services.cli.devices import LoadGenerator, LoadPlan
from services.common.table import landed_summary

pytestmark = pytest.mark.e2e

READY_WITHIN = 90.0  # the stack's own start-up bound
STOP_BOUND = 15.0  # services.cli._up.STOP_BOUND
MESSAGES = 600
RATE = 100.0  # messages per second: the client posts for MESSAGES / RATE seconds
ROLL_AGE = 2.0  # the handlers' SHOAL_HANDLER_ROLL_AGE: several rolls while the client posts

_HEADER = re.compile(r"(gateway|api key|data): (.+)\n")
_PROGRESS = re.compile(
    r"\s*(\d+) s  rate\s+(\d+) msg/s  accepted\s+([\d,]+)  landed\s+([\d,]+)  .*"
)
_FINAL = re.compile(r"stopped: accepted ([\d,]+)  landed ([\d,]+)  table (.+) \(version (\d+)\)")


def _number(text: str) -> int:
    return int(text.replace(",", ""))


def _progress(errors: Path) -> list[tuple[int, int, int]]:
    """(rate, accepted, landed) of each progress line printed so far."""
    found = (_PROGRESS.fullmatch(line) for line in errors.read_text().splitlines())
    return [(int(m[2]), _number(m[3]), _number(m[4])) for m in found if m]


async def _post(gateway: str, api_key: str) -> int:
    generator = LoadGenerator(
        gateway,
        LoadPlan(messages=MESSAGES, projects=10, batch=10, concurrency=4, rate=RATE),
        api_key=api_key,
    )
    return (await generator.run()).accepted_count


def test_the_progress_counts_what_the_gateway_accepted_and_the_last_line_what_landed(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    errors = tmp_path / "up.err"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHOAL_")}
    with errors.open("w") as stderr:
        process = subprocess.Popen(
            [
                *(sys.executable, "-m", "services.cli.main", "up", "--no-simulator"),
                *("--handlers", "1", "--partitions", "8", "--duration", "600"),
                *("--gateway-port", str(free_port()), "--dashboard-port", str(free_port())),
                *("--data-dir", str(data)),
            ],
            env={
                **env,
                "CI": "true",
                "SHOAL_STATE_DIR": str(tmp_path / "state"),
                "SHOAL_HANDLER_ROLL_AGE": str(ROLL_AGE),
            },
            cwd=tmp_path,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
    try:
        assert process.stdout is not None
        header: dict[str, str] = {}
        deadline = time.monotonic() + READY_WITHIN + 30
        while len(header) < 3 and time.monotonic() < deadline:
            line = process.stdout.readline()  # the stack's own bound ends it before ours
            if not line:
                break
            if match := _HEADER.fullmatch(line):
                header[match[1]] = match[2]
        assert len(header) == 3, f"shoal up printed {header}; stderr: {errors.read_text()[-3000:]}"

        accepted = anyio.run(_post, header["gateway"], header["api key"])
        assert accepted == MESSAGES
        # A progress line after the last answer: `shoal up` is another process, its output
        # is polled.
        deadline = time.monotonic() + 30
        while not any(line[1] == MESSAGES for line in _progress(errors)):
            assert time.monotonic() < deadline, errors.read_text()[-3000:]
            time.sleep(0.5)

        process.send_signal(signal.SIGINT)
        code = process.wait(timeout=STOP_BOUND + 15)
        rest = process.stdout.read()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        if process.stdout is not None:
            process.stdout.close()
    assert code == 0, errors.read_text()[-3000:]
    shown = errors.read_text()
    assert "\x1b[" not in shown, "terminal escapes without a terminal"

    progress = _progress(errors)
    # No simulator runs: what the progress counts is what the gateway accepted.
    assert [accepted for _, accepted, _ in progress][-1] == MESSAGES
    assert all(accepted <= MESSAGES for _, accepted, _ in progress)
    # While the client posts (from the first landed row until its last message was
    # counted), rows land a file at a time, yet the rate never reads 0.
    first_landed = next(i for i, (_, _, landed) in enumerate(progress) if landed > 0)
    posted = next(i for i, (_, accepted, _) in enumerate(progress) if accepted == MESSAGES)
    assert first_landed < posted, shown
    assert all(rate > 0 for rate, _, _ in progress[first_landed : posted + 1]), shown

    final = _FINAL.fullmatch(rest.splitlines()[-1]) if rest.strip() else None
    assert final, f"no final line at the end of stdout: {rest!r}; stderr: {shown[-2000:]}"
    assert (_number(final[1]), _number(final[2])) == (MESSAGES, MESSAGES)
    assert final[3] == str(data) == header["data"]
    assert int(final[4]) == landed_summary(data).version >= 0
