"""Autoscaling end to end: a real leader process runs the policy loop with the local
scaler, which starts and stops real handler processes (``python -m services.handler``)
on the session's real nats-server and etcd.

Periods are shortened by configuration: evaluation every 2 s, 4 s cooldown, pool in
[1, 3]. The load signal is the broker's lag (KEDA-style rule, 1000 messages per
handler): a burst published straight into the JetStream stream faster than the pool
lands it, until the pool has grown to its max; then nothing, so it drains and shrinks.

Why the lag and not project_count: a handler's project_count counts the registered
projects of its partitions that sent data in the last ``SHOAL_HANDLER_PROJECT_IDLE``
(300 s), longer than this test. The project-count rules keep the reference's values; the
messages are data without announcements, so project_count stays 0 and the pool is
"idle" (average below ``low_load_threshold`` 2) as soon as the lag allows it. The cpu
rule is switched off (``cpu_max_usage`` 1000): on two shared cores cpu is noise.

Run with ``pytest tests/e2e/test_autoscaling.py -s`` to see the decision timeline.
"""

from __future__ import annotations

import itertools
import signal
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import psutil
import pytest

from adapters.nats import NatsSettings, NatsTransport
from core.ingest import stamp
from infra.local._testservers import ServerInfo
from tests.e2e._cluster import Cluster, StatusDoc, member_ids

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]

PARTITIONS = 16
INTERVAL = 2.0
COOLDOWN = 4.0
MIN, MAX = 1, 3
LAG_PER_HANDLER = 1000
SLACK = 1.5  # seconds: status polling, one evaluation's own duration, clock reads

SCALING_ENV = {
    "SHOAL_SCALING_SCALER": "local",
    "SHOAL_SCALING_INTERVAL": str(INTERVAL),
    "SHOAL_SCALING_COOLDOWN": str(COOLDOWN),
    "SHOAL_SCALING_MIN_REPLICAS": str(MIN),
    "SHOAL_SCALING_MAX_REPLICAS": str(MAX),
    "SHOAL_SCALING_LAG_PER_HANDLER": str(LAG_PER_HANDLER),
    "SHOAL_SCALING_MAX_PROJECT_COUNT": "50",
    "SHOAL_SCALING_LOW_LOAD_THRESHOLD": "2",
    "SHOAL_SCALING_CPU_MAX_USAGE": "1000",
    "SHOAL_SCALING_HISTORY": "500",
    "SHOAL_LOCAL_STOP_TIMEOUT": "15",
    "SHOAL_HANDLER_STATS_INTERVAL": "1",
}


def nats_env(nats: ServerInfo, etcd: ServerInfo) -> Callable[[str], dict[str, str]]:
    def env(suffix: str) -> dict[str, str]:
        return {
            "SHOAL_COORDINATION": "etcd",
            "SHOAL_TRANSPORT": "nats",
            "SHOAL_ETCD_ENDPOINTS": etcd.endpoint,
            "SHOAL_NATS_URL": nats.url,
            "SHOAL_NATS_STREAM": f"E2E_{suffix}",
            "SHOAL_NATS_SUBJECT_PREFIX": f"e2e.{suffix}",
            "SHOAL_NATS_DEAD_LETTER_STREAM": f"E2E_DLQ_{suffix}",
            "SHOAL_NATS_DEAD_LETTER_PREFIX": f"e2edlq.{suffix}",
        }

    return env


def transport_of(nats: ServerInfo, cluster: Cluster) -> NatsTransport:
    """A publisher on the cluster's own stream (the same settings its processes use)."""
    env = nats_env(nats, nats)(cluster.suffix)
    return NatsTransport(
        NatsSettings(
            url=nats.url,
            stream=env["SHOAL_NATS_STREAM"],
            subject_prefix=env["SHOAL_NATS_SUBJECT_PREFIX"],
            dead_letter_stream=env["SHOAL_NATS_DEAD_LETTER_STREAM"],
            dead_letter_prefix=env["SHOAL_NATS_DEAD_LETTER_PREFIX"],
            name="e2e-autoscaling-load",
        )
    )


async def publish_until(transport: NatsTransport, stop: anyio.Event, projects: int = 40) -> int:
    """Data messages over ``projects`` projects, 500 per publish call, as fast as the
    broker confirms them, until ``stop``; returns how many were published."""
    per_call, sent = 500, 0
    while not stop.is_set():
        project = f"proj-{(sent // per_call) % projects:03d}"
        await transport.publish(
            stamp(
                project,
                [b'{"v": 1}'] * per_call,
                gateway_id="e2e-load",
                first_sequence=sent + 1,
                message_ids=[uuid.uuid4().hex for _ in range(per_call)],
                received_at=time.time(),
                partitions=PARTITIONS,
            )
        )
        sent += per_call
    return sent


def pool_processes(group: str) -> list[psutil.Process]:
    """Every live process the local scaler started for this group, launchers and
    handlers alike (they carry ``SHOAL_HANDLER_ID``), found from the outside."""
    found = []
    for proc in psutil.process_iter(["environ", "status"]):
        info: dict[str, Any] = proc.info
        env = info.get("environ") or {}
        if info.get("status") == psutil.STATUS_ZOMBIE:
            continue
        if env.get("SHOAL_GROUP") == group and "SHOAL_HANDLER_ID" in env:
            found.append(proc)
    return found


def handler_processes(group: str) -> list[psutil.Process]:
    """The ``python -m services.handler`` processes among them (not their launchers)."""
    handlers = []
    for proc in pool_processes(group):
        try:
            if proc.cmdline()[1:3] == ["-m", "services.handler"]:
                handlers.append(proc)
        except psutil.Error:
            continue
    return handlers


def decisions(doc: StatusDoc) -> list[dict[str, Any]]:
    """The active leader's decisions, oldest first."""
    return list(reversed(doc["scaling"]["decisions"]))


def timeline(records: list[dict[str, Any]], since: float) -> list[str]:
    return [
        f"  {r['at'] - since:+7.2f}s  {r['decision']:<5} {r['rule']:<11} "
        f"replicas {r['replicas_before']}->{r['replicas_after']}  lag={r['total_lag']}  "
        f"{r['reason']}"
        for r in records
    ]


async def test_a_burst_grows_the_pool_and_idle_shrinks_it(
    nats_server: ServerInfo, etcd_server: ServerInfo, tmp_path: Path
) -> None:
    work = tmp_path / "autoscaling"
    child_logs = work / "logs" / "handlers"
    cluster = Cluster(
        backend_env=nats_env(nats_server, etcd_server),
        work_dir=work,
        partitions=PARTITIONS,
        env={
            **SCALING_ENV,
            "SHOAL_LOCAL_LOG_DIR": str(child_logs),
            "SHOAL_HANDLER_DATA_DIR": str(work / "data"),
        },
    )
    seen_pool: list[tuple[float, int, int]] = []  # (time, handler processes, members)
    children_seen: set[int] = set()
    last: list[StatusDoc] = []
    spike_at = published_at = 0.0
    sent = 0
    try:
        with anyio.fail_after(300):
            async with cluster, anyio.create_task_group() as tg:
                await cluster.start_leader("leader")

                async def watch_pool() -> None:
                    while True:
                        procs = await anyio.to_thread.run_sync(handler_processes, cluster.group)
                        children_seen.update(p.pid for p in procs)
                        try:
                            doc = await cluster.status()
                        except Exception:  # the status API is between answers
                            members = -1
                        else:
                            last[:] = [doc]
                            members = len(member_ids(doc))
                        seen_pool.append((time.time(), len(procs), members))
                        await anyio.sleep(0.25)

                tg.start_soon(watch_pool)

                # 1. Bootstrap: the pool starts empty, below min -> +1; one handler joins
                #    and holds every partition; then the idle pool holds at min.
                await cluster.wait_for(
                    lambda d: (
                        len(member_ids(d)) == 1
                        and all(e["holder"] == e["owner"] is not None for e in d["partitions"])
                        and d["scaling"]["replicas"] == 1
                    ),
                    90.0,
                    "one handler started by the leader owns and holds every partition",
                )
                await cluster.wait_for(
                    lambda d: (
                        d["scaling"]["cooldown_left"] == 0 and decisions(d)[-1]["rule"] == "at-min"
                    ),
                    30.0,
                    "the idle pool of one holds at min",
                )

                # 2. A burst: publish faster than the pool lands until it has grown to MAX.
                spike_at = time.time()
                grown_event = anyio.Event()
                async with (
                    transport_of(nats_server, cluster) as transport,
                    anyio.create_task_group() as load,
                ):

                    async def drive() -> None:
                        nonlocal sent
                        sent = await publish_until(transport, grown_event)

                    load.start_soon(drive)
                    try:
                        await cluster.wait_for(
                            lambda d: d["scaling"]["replicas"] == MAX and len(member_ids(d)) == MAX,
                            120.0,
                            f"the pool grows to {MAX} handlers",
                        )
                    finally:
                        grown_event.set()
                published_at = time.time()

                # 3. Publishing stopped: the backlog drains, the pool shrinks back to MIN.
                await cluster.wait_for(
                    lambda d: (
                        d["scaling"]["replicas"] == MIN
                        and len(member_ids(d)) == MIN
                        and decisions(d)[-1]["rule"] == "at-min"
                    ),
                    120.0,
                    f"the idle pool shrinks to {MIN}",
                )
                last[:] = [await cluster.status()]
                tg.cancel_scope.cancel()
    except BaseException:
        print(f"\n===== logs ({work}; the handlers' own logs are in {child_logs}) =====")
        print(cluster.dump_logs())
        raise
    finally:
        leftovers = pool_processes(cluster.group)
        if last and spike_at:
            print(
                f"\nE2E autoscaling: {sent} messages published in "
                f"{published_at - spike_at:.1f} s (t=0 is the start of the burst)"
            )
            print("\n".join(timeline(decisions(last[0]), spike_at)))

    records = decisions(last[0])
    ups = [r for r in records if r["decision"] == "up" and r["at"] >= spike_at]
    downs = [r for r in records if r["decision"] == "down"]
    pool_max = max(n for _, n, _ in seen_pool)
    print(
        f"E2E autoscaling: handler processes seen: max {pool_max} at once, "
        f"{len(children_seen)} in all; left after the leader stopped: {len(leftovers)}"
    )

    # The burst grew the pool one step at a time, by the lag rule...
    assert [(r["replicas_before"], r["replicas_after"]) for r in ups] == [(1, 2), (2, 3)]
    assert all(r["rule"] == "lag" for r in ups)
    # ...at the first evaluation out of cooldown that saw the lag ask for more: so within
    # one evaluation period after the cooldown (evaluations come every INTERVAL).
    for record in records:
        if record["at"] < spike_at or record["at"] > ups[-1]["at"]:
            continue
        wanted = -(-(record["total_lag"] or 0) // LAG_PER_HANDLER)
        if wanted > record["replicas_before"] and record["rule"] != "cooldown":
            assert record["decision"] == "up", record
    for previous, step in itertools.pairwise(ups):
        assert COOLDOWN - 0.05 <= step["at"] - previous["at"] <= COOLDOWN + INTERVAL + SLACK
    since_bootstrap = [r["at"] for r in records]
    for earlier, later in itertools.pairwise(since_bootstrap):
        assert later - earlier <= INTERVAL + SLACK, "the loop kept its evaluation period"
    # Idle shrank it one step per cooldown, to min and no further.
    assert [(r["replicas_before"], r["replicas_after"]) for r in downs] == [(3, 2), (2, 1)]
    assert all(r["rule"] == "low-load" for r in downs)
    assert COOLDOWN - 0.05 <= downs[1]["at"] - downs[0]["at"] <= COOLDOWN + INTERVAL + SLACK
    # Never outside [min, max]: not in any decision, not in the processes seen.
    for record in records[1:]:  # records[0] is the bootstrap from 0 (below min)
        assert MIN <= record["replicas_after"] <= MAX, record
    assert pool_max <= MAX
    assert all(members <= MAX for _, _, members in seen_pool)
    # Every child had its own id and log; none outlived the leader.
    logs = sorted(child_logs.glob("*.log"))
    assert len(logs) == len(children_seen) == 3
    assert leftovers == []


async def test_handlers_do_not_outlive_a_sigkilled_leader(
    nats_server: ServerInfo, etcd_server: ServerInfo, tmp_path: Path
) -> None:
    """SIGKILL gives the leader no chance to stop its children: the kernel's
    parent-death signal reaches each launcher, which gives its handler one SIGTERM;
    each handler drains, revokes its lease and exits."""
    work = tmp_path / "killed"
    child_logs = work / "logs" / "handlers"
    cluster = Cluster(
        backend_env=nats_env(nats_server, etcd_server),
        work_dir=work,
        partitions=PARTITIONS,
        env={
            **SCALING_ENV,
            "SHOAL_SCALING_MIN_REPLICAS": "2",
            "SHOAL_SCALING_COOLDOWN": "0",
            "SHOAL_LOCAL_LOG_DIR": str(child_logs),
            "SHOAL_HANDLER_DATA_DIR": str(work / "data"),
        },
    )
    with anyio.fail_after(120):
        async with cluster:
            await cluster.start_leader("leader")
            await cluster.wait_for(
                lambda d: len(member_ids(d)) == 2, 90.0, "the leader starts two handlers"
            )
            children = await anyio.to_thread.run_sync(handler_processes, cluster.group)
            assert len(children) == 2
            killed_at = cluster.kill("leader", signal.SIGKILL)
            assert await cluster.wait_exit("leader", 5.0) == -signal.SIGKILL
            _, alive = await anyio.to_thread.run_sync(psutil.wait_procs, children, 30.0)
            took = time.time() - killed_at
    print(f"\nE2E autoscaling: handlers gone {took:.1f} s after the leader's SIGKILL")
    assert alive == []
    # The launchers go too: each exits right after its handler (a moment later, so wait).
    _, launchers_alive = psutil.wait_procs(pool_processes(cluster.group), 5.0)
    assert launchers_alive == []
    for log_path in child_logs.glob("*.log"):
        text = log_path.read_text()
        assert text.count("signal SIGTERM: stopping gracefully") == 1, text
        assert '"msg": "handler stopped"' in text, text
