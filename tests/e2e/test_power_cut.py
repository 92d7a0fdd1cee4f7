"""Durable before the ack, on a local disk: a power cut under a handler loses nothing it
acked, and the table opens; and the syscalls in order: each commit's log entry is fsynced
before the handler acks.

The landing zone lives on ``tests/_lossyfs.py``, a FUSE file system that keeps every write
since its file's (or its folder's) last fsync apart and drops it on ``crash()``, as a power
cut drops the page cache. A handler lands under load and acks what it committed; it is
SIGKILLed, the unsynced writes are dropped, and it starts again on what the disk kept.
Every message the gateway accepted must then be in the table exactly once: a commit the
handler acked before its log entry was durable would be gone, and the broker, told the
messages were landed, would never deliver them again (delta-rs fsyncs nothing: before
``adapters/delta/_durable.py`` this test lost every row landed before the cut)."""

from __future__ import annotations

import re
import shutil
import signal
import time
from pathlib import Path

import anyio
import anyio.to_thread
import pytest

from services.common.table import landed_table
from tests._lossyfs import LossyMount
from tests._unavailable import unavailable
from tests.e2e._cluster import Cluster, start_cluster
from tests.e2e._landed import LandingZone, read_landed, tally_run
from tests.e2e._load import LoadGenerator, LoadPlan
from tests.e2e.conftest import backend_env

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]

MESSAGES = 6_000
# 30 s of load; files roll every 2 s, so the cut comes between many acked commits and
# while the handler has more in flight.
PLAN = LoadPlan(messages=MESSAGES, projects=200, batch=20, concurrency=4, rate=200.0)
ROLL_AGE = 2.0


async def test_a_power_cut_under_a_handler_loses_nothing_it_acked(
    lossy_mount: LossyMount, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    cluster = Cluster(
        backend_env=backend_env(request, "nats", "nats"),
        work_dir=tmp_path / "cluster",
        partitions=16,
        landing=str(lossy_mount.path / "zone"),
        env={"SHOAL_HANDLER_ROLL_AGE": str(ROLL_AGE)},
    )
    zone = LandingZone(cluster.zone, None)
    with anyio.fail_after(300):
        async with cluster, anyio.create_task_group() as tg:
            await start_cluster(cluster, ("leader-a",), ("h1",))
            load = LoadGenerator(cluster.process("gateway").url, PLAN)
            done = anyio.Event()

            async def drive() -> None:
                await load.run()
                done.set()

            tg.start_soon(drive)
            await load.wait_accepted(MESSAGES // 3)
            landed_before = await _rows_landed(zone, at_least=MESSAGES // 6)
            assert not done.is_set(), "the load ended before the cut: it must come under load"

            cluster.kill("h1", signal.SIGKILL)
            assert await cluster.wait_exit("h1", 5.0) == -signal.SIGKILL
            cut_at = time.perf_counter()
            await anyio.to_thread.run_sync(lossy_mount.crash)
            await cluster.start_handler("h1")

            await done.wait()
            accepted = set(load.summary.accepted)
            missing = await _wait_landed(zone, accepted, within=120.0)
            back_after = time.perf_counter() - cut_at
            tg.cancel_scope.cancel()

    # Read afresh at the end: the table as a new reader opens it, its newest version.
    tally = tally_run(accepted, read_landed(cluster.zone, columns=["message_id"]))
    table = landed_table(cluster.zone, None)
    print(
        f"\nE2E power cut: landed_before_cut={landed_before} {tally.line()} "
        f"all_landed_after_cut_s={back_after:.1f} "
        f"table_version={None if table is None else table.version()}"
    )
    assert len(accepted) == MESSAGES, load.summary.line()
    assert not missing, f"{len(missing)} accepted messages lost, e.g. {sorted(missing)[:5]}"
    assert tally.exactly_once, f"{tally.line()}, e.g. {tally.examples}"


async def _rows_landed(zone: LandingZone, at_least: int) -> int:
    """Rows the table holds once it holds ``at_least`` (polled: across processes there is
    no event to await; the table is the point of truth)."""
    with anyio.fail_after(60):
        while True:
            await anyio.to_thread.run_sync(zone.refresh)
            if len(zone.ids()) >= at_least:
                return len(zone.ids())
            await anyio.sleep(0.2)


async def _wait_landed(zone: LandingZone, expected: set[str], within: float) -> set[str]:
    missing = set(expected)
    with anyio.move_on_after(within):
        while missing:
            await anyio.to_thread.run_sync(zone.refresh)
            missing = expected - zone.ids().keys()
            await anyio.sleep(0.5)
    return missing


# --- the order of the syscalls -------------------------------------------------------------

_LINKED = re.compile(r'^(\d+) +linkat\(.*"([^"]*/_delta_log/(\d{20})\.json)", 0\) = 0')
_SYNCED = re.compile(r"^(\d+) +(?:fsync|fdatasync)\(\d+<([^>]*/_delta_log/(\d{20})\.json)>")
_RESUMED = re.compile(r"^(\d+) +<\.\.\. (?:fsync|fdatasync) resumed>")
# uvloop writes to its sockets with write and writev (asyncio's own loop: sendto)
_ACKED = re.compile(r"^(\d+) +(?:write|writev|sendto)\(.*\$JS\.ACK\.[^ ]* +\d+\\r\\n\+ACK")


async def test_a_commits_log_entry_is_fsynced_before_the_handler_acks(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """The handler traced by strace (the syscalls only, in order): delta-rs links each of
    its commits' log entries into ``_delta_log``; before any ack the handler sends after
    such a commit, that entry is fsynced (its fsync has returned)."""
    strace = shutil.which("strace")
    if strace is None:
        unavailable("strace is not installed (bash infra/local/install.sh fuse)")
    trace = tmp_path / "handler.strace"
    cluster = Cluster(
        backend_env=backend_env(request, "nats", "nats"),
        work_dir=tmp_path / "cluster",
        partitions=8,
        env={"SHOAL_HANDLER_ROLL_AGE": str(ROLL_AGE)},
    )
    cluster.process_wrapper["h1"] = [
        strace, "-f", "-qq", "-y", "-s", "65536", "--seccomp-bpf",
        "-e", "trace=linkat,fsync,fdatasync,write,writev,sendto", "-o", str(trace),
    ]  # fmt: skip
    plan = LoadPlan(messages=2_000, projects=50, batch=20, concurrency=2, rate=200.0)
    zone = LandingZone(cluster.zone, None)
    with anyio.fail_after(240):
        async with cluster:
            await start_cluster(cluster, ("leader-a",), ("h1",))
            load = LoadGenerator(cluster.process("gateway").url, plan)
            await load.run()
            missing = await _wait_landed(zone, set(load.summary.accepted), within=60.0)
    assert not missing

    linked: dict[int, int] = {}  # version -> line of its link into _delta_log
    synced: dict[int, int] = {}  # version -> line where its first fsync returned
    pending: dict[str, int] = {}  # thread -> version of its fsync under way
    acks: list[int] = []
    for number, line in enumerate(trace.read_text().splitlines()):
        if found := _LINKED.match(line):
            linked.setdefault(int(found.group(3)), number)
        elif found := _SYNCED.match(line):
            if line.endswith("<unfinished ...>"):
                pending[found.group(1)] = int(found.group(3))
            else:
                synced.setdefault(int(found.group(3)), number)
        elif (found := _RESUMED.match(line)) and found.group(1) in pending:
            synced.setdefault(pending.pop(found.group(1)), number)
        elif _ACKED.match(line):
            acks.append(number)
    print(f"\nE2E fsync before ack: commits={len(linked)} fsynced={len(synced)} acks={len(acks)}")
    assert linked, "the handler committed nothing under strace"
    assert acks, "the handler acked nothing under strace"
    for version, link in sorted(linked.items()):
        ack = next((a for a in acks if a > link), None)
        if ack is None:
            continue  # its messages were acked with a later commit's: checked there
        assert version in synced, f"version {version}'s log entry was never fsynced"
        assert synced[version] < ack, (
            f"version {version} was acked (strace line {ack}) before its log entry's fsync "
            f"returned (line {synced[version]})"
        )
