"""The dashboard of a real `shoal up` stack (real nats-server and etcd, leader, handler and
gateway processes, the device simulator) in headless Chromium: the grid matches the
assignment in the store, a killed handler's partitions change owner on the page without
a reload, and Ctrl-C leaves no process behind."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import httpx
import pytest

from adapters.coordination import StoreAssignmentStore
from adapters.etcd import EtcdCoordinationStore, EtcdSettings
from core.model import Assignment
from tests._processes import alive, descendants
from tests.browser.conftest import artifact

if TYPE_CHECKING:
    from playwright.async_api import Page

pytestmark = pytest.mark.anyio

CELLS_JS = "els => els.map(e => [Number(e.dataset.partition), e.dataset.owner])"
STOP_BOUND = 15.0


@dataclass
class UpStack:
    process: subprocess.Popen[str]
    lines: dict[str, str]
    state: dict[str, Any]

    @property
    def dashboard(self) -> str:
        return self.lines["dashboard"]


def _pid_of_handler(handler_id: str) -> int:
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        is_handler = b"services.handler" in cmdline and b"\0-c\0" not in cmdline  # not its launcher
        if is_handler and f"SHOAL_HANDLER_ID={handler_id}".encode() in environ:
            return int(entry.name)
    raise AssertionError(f"no process for handler {handler_id}")


@pytest.fixture
def up(tmp_path: Path) -> Iterator[UpStack]:
    env = {**os.environ, "SHOAL_STATE_DIR": str(tmp_path / "state")}
    with (tmp_path / "up.err").open("w") as errors:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "services.cli.main",
                "up",
                "--coordination",
                "etcd",  # the test reads the assignment from etcd
                "--handlers",
                "3",
                "--rate",
                "100",
                "--projects",
                "50",
                "--data-dir",
                str(tmp_path / "data"),
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=errors,
            text=True,
        )
    lines: dict[str, str] = {}
    assert process.stdout is not None
    deadline = time.monotonic() + 120
    while len(lines) < 4 and time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        match = re.fullmatch(r"(gateway|api key|dashboard|data): (\S+)\n", line)
        if match:
            lines[match[1]] = match[2]
    if len(lines) < 4:
        process.kill()
        raise AssertionError(
            "shoal up did not print its URLs: " + (tmp_path / "up.err").read_text()[-3000:]
        )
    state = json.loads((tmp_path / "state" / "up.json").read_text())
    stack = UpStack(process, lines, state)
    family = descendants(process.pid)
    try:
        yield stack
    finally:
        family |= descendants(process.pid)
        if process.poll() is None:
            process.send_signal(signal.SIGINT)  # what Ctrl-C sends
        started = time.monotonic()
        code = process.wait(timeout=30)
        took = time.monotonic() - started
        process.stdout.close()
        left = alive(family)
        print(f"\nBROWSER shoal up stopped in {took:.1f} s, exit {code}, processes left: {left}")
        assert code == 0
        assert took <= STOP_BOUND
        assert not left, f"processes left behind: {left}"


async def _stored(state: dict[str, Any]) -> Assignment:
    settings = EtcdSettings(endpoints=(state["servers"]["etcd"],))
    async with StoreAssignmentStore(EtcdCoordinationStore(settings)) as store:
        assignment = await store.current()
    assert assignment is not None
    return assignment


def _owners(assignment: Assignment) -> list[list[Any]]:
    return [[p, ",".join(owners)] for p, owners in enumerate(assignment.owners)]


async def _page_matches_store(page: Page, state: dict[str, Any]) -> Assignment:
    """Wait until the page shows the stored generation, then compare every cell."""
    with anyio.fail_after(30):
        while True:
            assignment = await _stored(state)
            shown = await page.get_attribute("#partition-grid", "data-generation")
            if shown == str(assignment.generation):
                cells = await page.eval_on_selector_all(
                    "#partition-grid [data-partition]", CELLS_JS
                )
                if cells == _owners(assignment):
                    return assignment
            await anyio.sleep(0.5)  # two processes' views converge; no shared event


async def test_dashboard_of_shoal_up_shows_three_handlers_and_follows_a_killed_one(
    up: UpStack, page: Page
) -> None:
    await page.goto(up.dashboard)
    await page.wait_for_selector(
        '#backends[data-coordination="etcd"][data-transport="nats"][data-mode="exclusive"]'
    )
    before = await _page_matches_store(page, up.state)
    owners = {o for owners in before.owners for o in owners}
    assert len(owners) == 3 and len(before.owners) == 128
    await page.wait_for_selector(
        '#throughput:not([data-rate="0"]):not([data-rate=""])', timeout=20_000
    )
    async with httpx.AsyncClient(trust_env=False) as client:
        landed_before = (await client.get(up.state["status_urls"][0])).json()
    assert all(m["partitions"] > 0 for m in landed_before["members"])
    await page.screenshot(path=artifact("shoal-up.png"))

    victim = sorted(owners)[0]
    os.kill(_pid_of_handler(victim), signal.SIGKILL)
    with anyio.fail_after(60):
        while True:
            after = await _page_matches_store(page, up.state)
            if after.generation > before.generation and victim not in {
                o for owners in after.owners for o in owners
            }:
                break
            await anyio.sleep(0.5)
    assert not await page.query_selector_all(f'[data-owner="{victim}"]')
    await page.screenshot(path=artifact("shoal-up-after-kill.png"))
    print(
        f"\nBROWSER killed {victim}: generation {before.generation} -> {after.generation}, "
        f"owners now {sorted({o for owners in after.owners for o in owners})}"
    )


def _keys(up: UpStack, *args: str) -> subprocess.CompletedProcess[str]:
    """`shoal keys ...` as a user runs it beside `shoal up` (it finds the stack's keys file)."""
    env = {**os.environ, "SHOAL_STATE_DIR": str(Path(up.state["data_dir"]).parent / "state")}
    env.pop("SHOAL_GATEWAY_API_KEYS_FILE", None)
    return subprocess.run(
        [sys.executable, "-m", "services.cli.main", "keys", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


async def test_shoal_up_runs_with_api_keys_and_its_status_stays_open(up: UpStack) -> None:
    url = f"{up.lines['gateway']}/v1/projects/{{}}/messages"
    admin = {"authorization": f"Bearer {up.lines['api key']}"}
    async with httpx.AsyncClient(trust_env=False, timeout=10) as client:
        anonymous = await client.post(url.format("dev-1"), content=b'{"t": 1}')
        assert anonymous.status_code == 401, anonymous.text
        assert "API key" in anonymous.json()["error"]
        assert anonymous.headers["www-authenticate"].startswith("Bearer")
        wrong = await client.post(
            url.format("dev-1"),
            content=b'{"t": 1}',
            headers={"authorization": "Bearer shoal_000000000000_" + "x" * 43},
        )
        assert wrong.status_code == 401, wrong.text
        accepted = await client.post(url.format("dev-1"), content=b'{"t": 1}', headers=admin)
        assert accepted.status_code == 202, accepted.text

        created = _keys(up, "create", "--project", "only-this", "--label", "e2e")
        assert created.returncode == 0, created.stderr
        scoped = {"authorization": f"Bearer {created.stdout.strip()}"}
        # usable from the next request: the gateway checks the keys file on each one
        mine = await client.post(url.format("only-this"), content=b'{"t": 2}', headers=scoped)
        assert mine.status_code == 202, mine.text
        other = await client.post(url.format("dev-1"), content=b'{"t": 3}', headers=scoped)
        assert other.status_code == 403, other.text
        assert "only-this" not in other.json()["error"]  # the answer names no other project

        listed = json.loads(_keys(up, "list", "--json").stdout)
        key_id = next(k["key_id"] for k in listed["keys"] if k["label"] == "e2e")
        assert created.stdout.strip() not in json.dumps(listed)  # never the secret
        revoked = _keys(up, "revoke", key_id)
        assert revoked.returncode == 0, revoked.stderr
        again = await client.post(url.format("only-this"), content=b"{}", headers=scoped)
        assert again.status_code == 401, again.text  # from the next request on
        assert "revoked" in again.json()["error"]

        for read_only in (up.lines["dashboard"], up.state["status_urls"][0]):
            assert (await client.get(read_only)).status_code == 200
            assert (await client.post(read_only, content=b"{}")).status_code in (404, 405)
