"""Faults injected into a running cluster under steady load, one after another, each
measured as a row: what was lost and duplicated among the messages accepted while it
lasted, and how long until the pipeline recovered.

A row's messages are those the gateway accepted from the fault's start until the next
fault's (the load generator's acceptance order); after the last fault the load stops, the
zone is drained and every row is judged against what landed. "Recovered" is measured
where it happens: the partitions the fault hit are consumed again (``handled_at``, stamped
at fetch, of each one's first row after the fault), or, for a leader, the status
shows a new term in office; each within a bound derived from the settings plus MARGIN.

Observation crosses processes, so it polls: the leader's status (``record_status``) and
the landing table (``watch_zone``, which also notes when each file first became visible:
``seen_at``, the outside observer's clock that judges a paused writer).
"""

from __future__ import annotations

import json
import os
import random
import signal
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any
from unittest import mock
from urllib.parse import unquote

import anyio
import nats
import pyarrow as pa
import pyarrow.compute as pc
import redis.asyncio as redis_asyncio

from adapters.nats._subscription import PULL_EXPIRES
from adapters.natskv import NatsKvSettings
from adapters.redis import RedisSettings
from core.messages import Envelope
from core.partitioning import partition_for
from infra.local._testservers import ServerInfo
from infra.local.servers import NatsCluster, RunningNats
from services.common.backends import Backends
from services.common.settings import HandlerSettings
from tests.e2e._cluster import (
    LEASE_TTL,
    REPO_ROOT,
    Cluster,
    StatusDoc,
    member_ids,
    partitions_of,
    settled,
    start_cluster,
)
from tests.e2e._landed import LandingZone, RunTally, duplicates, read_landed, tally_run
from tests.e2e._load import LoadGenerator, LoadPlan, LoadSummary, project_id
from tests.faults._proxy import HOST as PROXY_HOST
from tests.faults._proxy import TcpProxy

__all__ = [
    "FAILOVER_BOUND",
    "FAULT_STREAM_CAP",
    "HANDLERS",
    "LEADERS",
    "LOAD",
    "MARGIN",
    "MIN_ROW_ACCEPTED",
    "PUBLISH_DEADLINE",
    "FaultRun",
    "Row",
    "cluster_settings",
]

HANDLERS = ("h1", "h2", "h3")
LEADERS = ("leader-a", "leader-b")
# The gateway answers 503 only past its publish deadline (SHOAL_GATEWAY_PUBLISH_DEADLINE),
# and what a broker stores of such a request afterwards "landed without a 202"
# (docs/limits.md): the matrix runs the gateways with a deadline longer than a broker's
# restart takes (a SIGKILLed Kafka recovers every log first: 22-52 s seen on 2 cores,
# past the default 20 s), and the devices wait for the answer past it.
PUBLISH_DEADLINE = 75.0
LOAD = LoadPlan(
    messages=None,
    projects=500,
    batch=10,
    concurrency=8,
    rate=800.0,
    request_timeout=PUBLISH_DEADLINE + 15.0,
)
# Devices that send every batch under an Idempotency-Key (as `shoal devices` and `shoal up`
# do), through a gateway of their own that the gateway row kills: a retry after a cut
# request lands under the ids of its first attempt. Keyed requests cost the NATS KV bucket
# two writes each, so these run beside LOAD, not instead of it.
KEYED = replace(LOAD, projects=100, concurrency=4, rate=300.0, idempotency_keys=True)
PAUSE = LEASE_TTL + 3.0  # SIGSTOP past the lease
SHORT_PAUSE = LEASE_TTL / 2 - 1.0  # SIGSTOP well under half the lease: no rebalance
# Every bound is what the mechanism needs by the settings the cluster runs with, plus
# MARGIN: what a loaded 2-core machine adds when the processes, the servers and the load
# share two cores (on the slowest machine seen a failover took the TTL + 6.7 s). A slower
# machine can give more with SHOAL_FAULT_MARGIN; a broken mechanism misses any margin (a
# holder that never lets go is waited for claim_patience, 60 s).
MARGIN = float(os.environ.get("SHOAL_FAULT_MARGIN", LEASE_TTL))
ROLL_AGE = HandlerSettings.model_fields["roll_age"].default  # the oldest row a file waits for
RETRY_CAP = HandlerSettings.model_fields["retry_cap"].default  # the longest retry backoff
# The lease expires at most a TTL after the fault; the standby is elected, or the lost
# holder's partitions claimed and consumed by their new owner, within MARGIN of that.
FAILOVER_BOUND = LEASE_TTL + MARGIN
TAKEOVER_BOUND = LEASE_TTL + MARGIN
# A process that resumes (SIGCONT, a poison message set aside) consumes within MARGIN.
RESUME_BOUND = MARGIN
# Releases accepted again: the next retry comes within the backoff's cap.
RELEASE_RECOVERY_BOUND = RETRY_CAP + MARGIN
SERVER_RESTART_BOUND = 120.0  # Kafka recovers every partition's log before it serves
ZONE_POLL = 0.5
# A minute of churn in the full matrix; the tier in bin/test churns half as long (tox.ini).
CHURN_SECONDS = float(os.environ.get("SHOAL_FAULT_CHURN_SECONDS", "60"))
DEAD_LETTER_BOUND = 30.0  # a poison message is listed as a dead letter within this
RELEASE_REFUSAL = 8.0  # how long the store refuses releases after the first one failed
# The data stream's cap in a fault run on NATS: room for what handlers hold unacked (a roll
# age of the load, about 5 MB) plus what the leader keeps until it trims at half the cap,
# plus what a failover leaves untrimmed (the lease and MARGIN of the load, a few MB).
FAULT_STREAM_CAP = 16 << 20
# The full-stream row lowers the cap, live, to what the stream holds plus this: filling 16
# MiB took 75 s here (the server's fsyncs, not the gateway, set the pace: 2 KB messages
# filled it no faster), this takes seconds and fills the stream all the same.
FILL_ROOM = 2 << 20
# With every handler stopped, devices of their own fill the stream in seconds (the steady
# load alone would take minutes): unthrottled, large batches.
BURST = LoadPlan(messages=None, projects=500, batch=100, concurrency=8, retry_after_stop=False)
STREAM_FILL_BOUND = 240.0  # seconds the loads get to fill the stream
FULL_REFUSALS = 20  # 503s that show the stream pushing back, not one unlucky request
# A row judged on few messages proves little: each lasts seconds under LOAD (800 msgs/s).
MIN_ROW_ACCEPTED = 500
# The cluster pair (tests/faults/_matrix.py CLUSTER_PAIR): one server of three is SIGKILLed.
# nats-server's raft makes a follower wait 4-9 s (server/raft.go, min/maxElectionTimeoutDefault)
# for a lost leader before it campaigns: every stream, bucket and consumer the killed server
# led is led again within that, and nothing it led takes a write or a fetch meanwhile.
NATS_ELECTION = 9.0
# A handler's pull request that stood on a killed consumer leader is answered by nobody: the
# subscription sends the next once its life is over (PULL_EXPIRES and the second it adds).
PULL_LIFE = PULL_EXPIRES + 1.0
# A server that does not lead the coordination bucket (the data stream's leader, a follower):
# publishes and the consumers it led wait for an election, then for a pull request's life.
SERVER_LOST_BOUND = NATS_ELECTION + PULL_LIFE + MARGIN
# The server that leads the coordination bucket: no renewal, release or claim is stored until
# the election, so a lease can lapse meanwhile (a key expires by its own TTL, an election or
# not) and its holder's partitions are taken over after it; the handoff under way completes.
BUCKET_LOST_BOUND = NATS_ELECTION + PULL_LIFE + TAKEOVER_BOUND
CLUSTER_WHOLE_BOUND = 120.0  # a restarted server catches up on what it missed under the load


# The coordination store's address variable and URL form, for a process behind a proxy.
_PROXIED_URL = {
    "etcd": ("SHOAL_ETCD_ENDPOINTS", "{}"),
    "redis": ("SHOAL_REDIS_URL", "redis://{}"),
    "nats": ("SHOAL_NATS_KV_URL", "nats://{}"),
}


@dataclass
class Row:
    """One fault, as the table reports it."""

    backends: str
    fault: str
    first: int  # index (acceptance order) of the first message accepted during the fault
    last: int = 0  # one past the last
    recovery_s: float | None = None
    lost: int = 0
    duplicated: int = 0
    notes: dict[str, Any] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def line(self) -> str:
        recovery = "-" if self.recovery_s is None else f"{self.recovery_s:.1f}"
        notes = " ".join(f"{k}={v}" for k, v in self.notes.items())
        return (
            f"FAULT {self.backends:<12} {self.fault:<44} accepted={self.last - self.first:>6} "
            f"lost={self.lost} duplicated={self.duplicated} recovery_s={recovery} {notes}"
        ).rstrip()


class FaultRun:
    """A cluster under ``LOAD`` with two leaders and ``HANDLERS``, and the faults to inject.
    Use ``async with FaultRun(...)`` inside the cluster; it starts and stops the load and
    the observers."""

    def __init__(
        self,
        cluster: Cluster,
        backends: str,
        servers: Mapping[str, ServerInfo] | None = None,
        nodes: NatsCluster | None = None,
    ) -> None:
        """``servers``: the servers the cluster runs on, by kind (``etcd``, ``redis``,
        ``nats``, ``kafka``), for the rows that kill and restart one; ``nodes``: the NATS
        cluster it runs on instead (the cluster pair), for the rows that kill one of its
        servers."""
        self.cluster = cluster
        self.backends = backends
        self.servers = dict(servers or {})
        self.nodes = nodes
        self.proxies: dict[str, TcpProxy] = {}  # by process name
        self.zone = LandingZone(cluster.zone, cluster.s3)
        self.history: list[tuple[float, StatusDoc]] = []
        self.rows: list[Row] = []
        self.load: LoadGenerator | None = None
        self._stop_load = anyio.Event()
        self._zone_lock = anyio.Lock()  # a LandingZone is read by one refresh at a time
        self.unanswered: list[str] = []  # landed message ids no 202 named (``finish``)
        self.tally: RunTally | None = None  # the whole run against the table (``finish``)
        self._tg: Any = None
        self._extra: list[tuple[Row, list[str]]] = []  # ids accepted by a row's own load

    # -- running ----------------------------------------------------------------------------

    async def start(self, tg: Any, network: Any, plan: LoadPlan = LOAD) -> None:
        """Start the cluster, the observers and the load in ``tg``, the store proxies in
        ``network``: a task group that outlives the cluster (its processes reach the store
        through them until they have stopped)."""
        cluster = self.cluster
        await self._route_through_proxies(network)
        await start_cluster(cluster, LEADERS, HANDLERS)
        self._tg = tg
        tg.start_soon(cluster.record_status, self.history)
        tg.start_soon(self.watch_zone)
        self.load = LoadGenerator(cluster.process("gateway").url, plan)
        tg.start_soon(self.load.run, self._stop_load)
        await self.load.wait_accepted(2_000)

    async def finish(self, within: float = 120.0) -> set[str]:
        """Stop the load, wait until every accepted message landed (at most ``within`` s),
        judge every row, and the whole run (``tally``: every id accepted in it, the warm-up
        before the first fault included, read from the table's committed version); the ids
        still missing."""
        load = self._load()
        self._stop_load.set()
        await load.wait_stopped()
        accepted = list(load.summary.accepted)
        extra = [m for _, ids in self._extra for m in ids]
        missing = set(accepted) | set(extra)
        with anyio.move_on_after(within):
            while missing:
                await self.refresh_zone()
                missing = (set(accepted) | set(extra)) - self.zone.ids().keys()
                if missing:
                    await anyio.sleep(ZONE_POLL)
        landed = self.zone.ids()
        dupes = duplicates(landed)
        # A message the broker stored although the gateway did not answer 202 for it (a
        # 503 after the store, a gateway killed before its answer): the simulator sent its
        # payload again under a new id, so it landed twice in all but id.
        self.unanswered = sorted(landed.keys() - set(accepted) - set(extra))
        for index, row in enumerate(self.rows):
            end = self.rows[index + 1].first if index + 1 < len(self.rows) else len(accepted)
            window = accepted[row.first : end]
            row.last = end
            row.lost = sum(1 for m in window if m in missing)
            row.duplicated = sum(1 for m in window if m in dupes)
        for row, ids in self._extra:
            row.lost += sum(1 for m in ids if m in missing)
            row.duplicated += sum(1 for m in ids if m in dupes)
            row.notes["own_devices_accepted"] = len(ids)
        self.tally = await self.tally_run([*accepted, *extra])
        return missing

    async def tally_run(self, accepted: list[str]) -> RunTally:
        """``accepted`` against the table as its newest version commits it, read afresh
        (not the incremental ``zone`` the rows are judged on)."""
        table = await anyio.to_thread.run_sync(
            partial(read_landed, self.cluster.zone, self.cluster.s3, columns=["message_id"])
        )
        return tally_run(accepted, table)

    async def _route_through_proxies(self, tg: Any) -> None:
        """The last handler and every leader reach the coordination store through a
        ``TcpProxy`` of their own (etcd, Redis, NATS KV on a URL of its own: a Kafka
        client follows the brokers' advertised addresses around any proxy in front of the
        bootstrap port)."""
        kind = self.backends.split("+")[0]
        if kind not in _PROXIED_URL or kind not in self.servers:
            return
        host, port = self.servers[kind].endpoint.split(",")[0].rsplit(":", 1)
        variable, url = _PROXIED_URL[kind]
        for name in (HANDLERS[-1], *LEADERS):
            proxy = TcpProxy(host, int(port))
            await tg.start(proxy.serve)
            self.proxies[name] = proxy
            self.cluster.process_env[name] = {variable: url.format(f"{PROXY_HOST}:{proxy.port}")}

    async def inject(self, fault: str) -> Row:
        """The fault row ``fault`` (a name of ``tests.faults._matrix.rows_of``)."""
        coordination, transport = self.backends.split("+")
        if fault == "server_restarted":
            return await self.server_restarted(transport, "store and broker")
        if fault == "store_restarted":
            return await self.server_restarted(coordination, "store")
        if fault == "broker_restarted":
            return await self.server_restarted(transport, "broker")
        inject: Callable[[], Awaitable[Row]] = getattr(self, fault)
        return await inject()

    def load_summary(self) -> LoadSummary:
        return self._load().summary

    def _load(self) -> LoadGenerator:
        if self.load is None:
            raise RuntimeError("start the run first")
        return self.load

    def _begin(self, fault: str) -> Row:
        row = Row(self.backends, fault, first=len(self._load().summary.accepted))
        self.rows.append(row)
        return row

    async def refresh_zone(self) -> None:
        async with self._zone_lock:
            await anyio.to_thread.run_sync(self.zone.refresh)

    async def watch_zone(self) -> None:
        while True:
            await self.refresh_zone()
            await anyio.sleep(ZONE_POLL)

    async def settle(self, handlers: Collection[str], within: float = 60.0) -> StatusDoc:
        return await self.cluster.wait_for(
            lambda d: settled(d, handlers), within, f"{sorted(handlers)} own and hold everything"
        )

    async def consumed_again(
        self, row: Row, partitions: Collection[int], since: float, bound: float, what: str
    ) -> None:
        """The row's recovery: once each of ``partitions`` that the load reaches was
        consumed again, the longest its first message after ``since`` waited unconsumed
        past the fault (``handled_at`` - max(``since``, ``received_at``)), a problem past
        ``bound``. Measured where it happens: a handler stamps ``handled_at`` on the rows of
        a batch as it fetches it. A message accepted after ``since`` counts only from its
        acceptance: the load's round robin reaches a partition of one project every few
        seconds (at 500 msg/s over 500 projects, every 10 s), and the wait for that message
        is the load's, not the fault's. The row is seen once its file rolls, so it is
        waited for ``bound`` + ROLL_AGE + MARGIN. A partition no project of the load hashes
        to never lands anything: it is not waited for."""
        within = bound + ROLL_AGE + MARGIN
        wanted = pa.array(sorted(set(partitions) & self._loaded_partitions()), pa.int64())
        if not len(wanted):
            row.recovery_s = 0.0
            return
        with anyio.move_on_after(within):
            while True:
                table = self.zone.table()
                if table.num_rows:
                    recent = table.filter(
                        pc.and_(
                            pc.greater_equal(table.column("handled_at"), since),
                            pc.is_in(pc.cast(table.column("partition"), pa.int64()), wanted),
                        )
                    )
                    firsts: dict[int, tuple[float, float]] = {}
                    for partition, handled, received in zip(
                        recent.column("partition").to_pylist(),
                        recent.column("handled_at").to_pylist(),
                        recent.column("received_at").to_pylist(),
                        strict=True,
                    ):
                        if partition not in firsts or handled < firsts[partition][0]:
                            firsts[partition] = (handled, received)
                    if len(firsts) == len(wanted):
                        row.recovery_s = max(
                            handled - max(since, received) for handled, received in firsts.values()
                        )
                        break
                await anyio.sleep(ZONE_POLL)
        if row.recovery_s is None:
            row.problems.append(f"{what}: no row of them consumed and seen within {within:.0f} s")
        elif row.recovery_s > bound:
            row.problems.append(
                f"{what}: consumed again after {row.recovery_s:.1f} s (bound {bound:.0f} s)"
            )

    async def waited_past(
        self, row: Row, partitions: Collection[int], since: float, bound: float, what: str
    ) -> None:
        """The row's recovery for a fault that stalls some of ``partitions`` a moment after
        it, not at once (a killed server's consumers: what a pull had delivered before the
        kill is still fetched after it, and ``consumed_again``'s first row would show no
        wait): once each partition the load reaches has a row accepted after ``since``,
        the longest any of its messages up to that one waited unconsumed past the fault
        (``handled_at`` - max(``since``, ``received_at``)), a problem past ``bound``. A
        partition that never stalled shows the fetch's own latency. Waited for as long as
        ``consumed_again`` waits."""
        within = bound + ROLL_AGE + MARGIN
        wanted = pa.array(sorted(set(partitions) & self._loaded_partitions()), pa.int64())
        if not len(wanted):
            row.recovery_s = 0.0
            return
        with anyio.move_on_after(within):
            while True:
                table = self.zone.table()
                if table.num_rows:
                    recent = table.filter(
                        pc.and_(
                            pc.greater_equal(table.column("handled_at"), since),
                            pc.is_in(pc.cast(table.column("partition"), pa.int64()), wanted),
                        )
                    )
                    rows = list(
                        zip(
                            recent.column("partition").to_pylist(),
                            recent.column("handled_at").to_pylist(),
                            recent.column("received_at").to_pylist(),
                            strict=True,
                        )
                    )
                    after: dict[int, float] = {}  # the first message accepted after the fault
                    for partition, _, received in rows:
                        if received >= since and received < after.get(partition, float("inf")):
                            after[partition] = received
                    if len(after) == len(wanted):
                        row.recovery_s = max(
                            handled - max(since, received)
                            for partition, handled, received in rows
                            if received <= after[partition]
                        )
                        break
                await anyio.sleep(ZONE_POLL)
        if row.recovery_s is None:
            row.problems.append(f"{what}: no row of them consumed and seen within {within:.0f} s")
        elif row.recovery_s > bound:
            row.problems.append(
                f"{what}: a message waited {row.recovery_s:.1f} s past the fault "
                f"(bound {bound:.0f} s)"
            )

    def _loaded_partitions(self) -> set[int]:
        plan = self._load().plan
        count = self.cluster.partitions
        return {partition_for(project_id(k + 1), count) for k in range(plan.projects)}

    def _seen(self, predicate: Callable[[StatusDoc], bool], after: float) -> float | None:
        return next((at for at, doc in self.history if at >= after and predicate(doc)), None)

    async def _failover(self, row: Row, term: int, since: float) -> None:
        """Wait until a term above ``term`` is in office; its first sighting after ``since``
        is the row's recovery, bounded by ``FAILOVER_BOUND``."""

        def newer(doc: StatusDoc) -> bool:
            return doc["leader"] is not None and int(doc["leader"]["term"]) > term

        await self.cluster.wait_for(newer, FAILOVER_BOUND + MARGIN, f"a term above {term}")
        # The recorder may not have logged the document wait_for just saw: take whichever
        # sighting came first.
        took_over = min(time.time(), self._seen(newer, since) or float("inf"))
        row.recovery_s = took_over - since
        if row.recovery_s > FAILOVER_BOUND:
            row.problems.append(f"failover took {row.recovery_s:.1f} s (bound {FAILOVER_BOUND} s)")

    # -- the faults --------------------------------------------------------------------------

    async def handler_killed(self, victim: str = "h1") -> Row:
        """SIGKILL a handler in the middle of its batches; it comes back under its id."""
        row = self._begin("handler SIGKILL mid-batch")
        cluster = self.cluster
        held = partitions_of(await cluster.status(), victim)
        killed_at = cluster.kill(victim, signal.SIGKILL)
        await cluster.wait_exit(victim, 5.0)
        await self.consumed_again(row, held, killed_at, TAKEOVER_BOUND, f"{victim}'s partitions")
        row.notes["partitions"] = len(held)
        await cluster.start_handler(victim, ready=False)
        await self.settle(HANDLERS)
        return row

    async def gateway_killed(self, name: str = "gateway-2") -> Row:
        """A second gateway, fed by devices of their own (``KEYED``), is SIGKILLed with
        their requests in flight and started again at its address: every cut request is
        retried under its key, so a batch the broker stored without an answer lands once,
        under the ids its retry's 202 names (judged with the row; no id may land without a
        202). Recovery: the gateway ready again."""
        row = self._begin("gateway SIGKILL mid-request, restarted")
        cluster = self.cluster
        gateway = await cluster.start_gateway(name)
        devices = LoadGenerator(gateway.url, KEYED)
        stop_devices = anyio.Event()
        self._tg.start_soon(devices.run, stop_devices)
        await devices.wait_accepted(500)
        killed_at = cluster.kill(name, signal.SIGKILL)
        await cluster.wait_exit(name, 5.0)
        await cluster.start_gateway(name, port=gateway.port)
        row.recovery_s = time.time() - killed_at
        await devices.wait_accepted(devices.accepted_count + 1_000)
        stop_devices.set()
        await devices.wait_stopped()
        self._extra.append((row, list(devices.summary.accepted)))
        cut = devices.summary.transport_errors
        row.notes["cut_requests"] = cut
        if not cut:
            row.problems.append("no request was cut off by the kill: the row proved nothing")
        if devices.summary.failed_batches:
            row.problems.append(f"{devices.summary.failed_batches} keyed batches given up")
        cluster.kill(name, signal.SIGTERM)
        await cluster.wait_exit(name, 30.0)
        return row

    async def handler_paused_past_lease(self, victim: str = "h2") -> Row:
        """SIGSTOP a handler past its lease while it writes a file, SIGCONT it: its
        partitions move on, and once it wakes it makes nothing visible for what it lost
        (judged by when files appear in the table), and the file it was writing is either
        in the table (committed before the stop) or removed."""
        row = self._begin("handler SIGSTOP past its lease mid-write, SIGCONT")
        cluster = self.cluster
        held = partitions_of(await cluster.status(), victim)
        stopped_at, writing = await self._stop_mid_write(victim)
        row.notes["stopped_mid_write"] = writing is not None
        if writing is None:
            row.problems.append(f"{victim} was never stopped while a file of its was in flight")
        lost = await cluster.wait_for(
            lambda d: victim not in member_ids(d) and not partitions_of(d, victim),
            TAKEOVER_BOUND + MARGIN,
            f"{victim}'s partitions are given to others while it is stopped",
        )
        lost_generation = int(lost["generation"])
        await self.consumed_again(row, held, stopped_at, TAKEOVER_BOUND, f"{victim}'s partitions")
        # The pause's length is the fault being injected, not a synchronisation.
        await anyio.sleep(max(0.0, stopped_at + PAUSE - time.time()))
        resumed_at = cluster.kill(victim, signal.SIGCONT)
        await self.settle(HANDLERS)
        with anyio.move_on_after(RESUME_BOUND):  # resumed, its write ends committed or deleted
            while writing is not None:
                if self._resolved(writing):
                    break
                await anyio.sleep(ZONE_POLL)
        # A late commit gets the time to become visible before it is judged.
        await anyio.sleep(max(0.0, resumed_at + 3.0 - time.time()))
        await self.refresh_zone()
        zombie = self._late_rows(victim, held, lost_generation, stopped_at + LEASE_TTL)
        row.notes["partitions"] = len(held)
        row.notes["zombie_rows"] = zombie
        if zombie:
            row.problems.append(
                f"{victim} made {zombie} rows of partitions it had lost visible "
                "after its lease expired"
            )
        if writing is not None and not self._resolved(writing):
            row.problems.append(f"{victim} left its uncommitted {writing.name} behind")
        return row

    def _resolved(self, file: Path) -> bool:
        return not file.exists() or ever_committed(self.cluster.zone, file)

    async def _stop_mid_write(self, victim: str, within: float = 60.0) -> tuple[float, Path | None]:
        """SIGSTOP ``victim`` as soon as one of its files is being written (a new
        ``{victim}-*.parquet`` in the landing zone, not yet committed or just so): the stop
        time and that file; after ``within`` seconds it is stopped wherever it is (file
        None). The watching and the signal are ``tests.faults._stopper``'s, a process
        of its own, so a loaded test process does not miss a write of a few milliseconds."""
        proc = self.cluster.process(victim)
        done = await anyio.run_process(
            [
                sys.executable,
                "-m",
                "tests.faults._stopper",
                str(self.cluster.zone),
                f"{victim}-",
                str(proc.pid),
                str(within),
            ],
            cwd=REPO_ROOT,
        )
        outcome = json.loads(done.stdout)
        stopped_at = float(outcome["stopped_at"])
        proc.stopped = True
        proc.signals.append((stopped_at, signal.SIGSTOP.name))
        return stopped_at, None if outcome["file"] is None else Path(outcome["file"])

    async def handler_paused_briefly(self, victim: str = "h3") -> Row:
        """SIGSTOP a handler for well under half its lease: nothing is rebalanced, and its
        partitions land again soon after SIGCONT."""
        row = self._begin("handler SIGSTOP under half its lease")
        cluster = self.cluster
        before = await cluster.status()
        held, generation = partitions_of(before, victim), int(before["generation"])
        stopped_at = cluster.kill(victim, signal.SIGSTOP)
        await anyio.sleep(SHORT_PAUSE)  # the fault's length
        resumed_at = cluster.kill(victim, signal.SIGCONT)
        await self.consumed_again(
            row, held, resumed_at, RESUME_BOUND, f"{victim}'s partitions after SIGCONT"
        )
        rebalanced = [
            int(doc["generation"])
            for at, doc in self.history
            if stopped_at <= at and int(doc["generation"]) != generation
        ]
        row.notes["generations_after"] = sorted(set(rebalanced))
        if rebalanced:
            row.problems.append(f"a pause under half the lease rebalanced: {rebalanced[:3]}")
        return row

    async def leader_killed(self) -> Row:
        """SIGKILL the active leader: the standby is in office within the lease TTL + 2 s;
        the killed one comes back as the standby."""
        row = self._begin("leader SIGKILL")
        cluster = self.cluster
        leader = await cluster.active_leader()
        assert leader is not None, "nobody leads before the leader is killed"
        old, term = leader
        killed_at = cluster.kill(old, signal.SIGKILL)
        await cluster.wait_exit(old, 5.0)
        await self._failover(row, term, killed_at)
        await cluster.start_leader(old)
        await self.settle(HANDLERS)
        return row

    async def leader_paused_past_lease(self, extra_handler: str = "h4") -> Row:
        """SIGSTOP the active leader past its lease, SIGCONT it while the member set changes:
        the new leader publishes, the old one's stale term publishes nothing."""
        row = self._begin("leader SIGSTOP past its lease, SIGCONT")
        cluster = self.cluster
        leader = await cluster.active_leader()
        assert leader is not None, "nobody leads before the leader is paused"
        old, term = leader
        stopped_at = cluster.kill(old, signal.SIGSTOP)
        await self._failover(row, term, stopped_at)
        # A member joins while the old leader sleeps and leaves as it wakes: it has a
        # member change to act on with its stale term.
        await cluster.start_handler(extra_handler, ready=False)
        await self.settle((*HANDLERS, extra_handler))
        await anyio.sleep(max(0.0, stopped_at + PAUSE - time.time()))  # the fault's length
        resumed_at = cluster.kill(old, signal.SIGCONT)
        cluster.kill(extra_handler, signal.SIGTERM)
        await cluster.wait_exit(extra_handler, 30.0)
        await self.settle(HANDLERS)
        self._no_stale_publish(row, old, term, since=resumed_at)
        return row

    async def handler_cut_off(self) -> Row:
        """Blackhole the link between a handler and the store past its lease, then heal
        it: its partitions move on and land again, it makes nothing visible for what it
        lost (judged by when files appear), and it rejoins."""
        row = self._begin("handler cut off from the store past its lease")
        victim = HANDLERS[-1]
        proxy = self.proxies[victim]
        cluster = self.cluster
        held = partitions_of(await cluster.status(), victim)
        cut_at = time.time()
        proxy.blackhole()
        lost = await cluster.wait_for(
            lambda d: victim not in member_ids(d) and not partitions_of(d, victim),
            TAKEOVER_BOUND + MARGIN,
            f"{victim}'s partitions are given to others while it is cut off",
        )
        await self.consumed_again(row, held, cut_at, TAKEOVER_BOUND, f"{victim}'s partitions")
        await anyio.sleep(max(0.0, cut_at + PAUSE - time.time()))  # the fault's length
        proxy.heal()
        await self.settle(HANDLERS)
        zombie = self._late_rows(victim, held, int(lost["generation"]), cut_at + LEASE_TTL)
        row.notes["partitions"] = len(held)
        row.notes["zombie_rows"] = zombie
        if zombie:
            row.problems.append(f"{victim} made {zombie} rows visible after its lease expired")
        return row

    async def leader_cut_off(self) -> Row:
        """Blackhole the active leader's link to the store past its lease, then heal it:
        the standby is in office within the lease TTL + 2 s, and the old leader publishes
        nothing under its old term once it can reach the store again."""
        row = self._begin("leader cut off from the store past its lease")
        cluster = self.cluster
        leader = await cluster.active_leader()
        assert leader is not None, "nobody leads before the leader is cut off"
        old, term = leader
        proxy = self.proxies[old]
        cut_at = time.time()
        proxy.blackhole()
        await self._failover(row, term, cut_at)
        await anyio.sleep(max(0.0, cut_at + PAUSE - time.time()))  # the fault's length
        healed_at = time.time()
        proxy.heal()
        await self.settle(HANDLERS)
        self._no_stale_publish(row, old, term, since=healed_at)
        return row

    def _no_stale_publish(self, row: Row, leader: str, term: int, since: float) -> None:
        """``leader`` published nothing under ``term`` or older after ``since``."""
        stale = [
            e
            for e in self.cluster.process(leader).log_events("published assignment")
            if int(e.get("term", -1)) <= term and float(e.get("ts", 0)) >= since
        ]
        row.notes["stale_publishes"] = len(stale)
        if stale:
            row.problems.append(f"{leader} published under its stale term {term}: {stale[:2]}")

    def _late_rows(
        self, victim: str, partitions: Collection[int], generation: int, after: float
    ) -> int:
        """Rows of ``victim`` for ``partitions`` under ``generation`` or older that became
        visible after ``after``."""
        table = self.zone.table()
        late = table.filter(
            pc.and_(
                pc.and_(
                    pc.equal(table.column("handler_id"), victim),
                    pc.less_equal(table.column("generation"), generation),
                ),
                pc.and_(
                    pc.is_in(
                        pc.cast(table.column("partition"), pa.int64()),
                        pa.array(sorted(partitions), pa.int64()),
                    ),
                    pc.greater_equal(table.column("seen_at"), after),
                ),
            )
        )
        return int(late.num_rows)

    async def handler_churn(self, seconds: float = CHURN_SECONDS) -> Row:
        """For ``seconds``, every 1-5 s a handler joins or leaves gracefully (two extra
        ones come and go); then the pool is balanced within one and nothing was lost."""
        row = self._begin(f"handler churn: a join or leave every 1-5 s for {seconds:g} s")
        cluster = self.cluster
        rng = random.Random(7)  # the same walk every run
        extra = ("h4", "h5")
        changes = 0
        started = time.time()
        while time.time() - started < seconds:
            running = [h for h in extra if h in cluster.processes and cluster.process(h).running()]
            joinable = [h for h in extra if h not in running]
            if running and (not joinable or rng.random() < 0.5):
                cluster.kill(rng.choice(running), signal.SIGTERM)
            else:
                await cluster.start_handler(joinable[0], ready=False)
            changes += 1
            await anyio.sleep(rng.uniform(1.0, 5.0))  # the churn's cadence: the fault
        churn_end = time.time()
        for name in extra:
            if name in cluster.processes and cluster.process(name).running():
                cluster.kill(name, signal.SIGTERM)
            if name in cluster.processes:
                await cluster.wait_exit(name, 30.0)
        doc = await self.settle(HANDLERS, within=90.0)
        row.recovery_s = time.time() - churn_end
        loads = sorted(len(partitions_of(doc, h)) for h in HANDLERS)
        row.notes["changes"] = changes
        row.notes["loads"] = loads
        if loads[-1] - loads[0] > 1:
            row.problems.append(f"not balanced within one after the churn: {loads}")
        return row

    async def stream_full(self) -> Row:
        """Every handler leaves (SIGTERM) while the load goes on and a burst of devices
        (``BURST``) fills the data stream (``FAULT_STREAM_CAP``) until the gateway answers
        the load 503; then they come back. The burst's accepted messages are judged too.
        The full stream drops nothing, the leader keeps its term (lease renewals go to the
        coordination bucket, not the full stream) and the handlers consume within the
        bound once back."""
        row = self._begin("data stream full: every handler stopped, then back")
        cluster, load = self.cluster, self._load()
        leader = await cluster.active_leader()
        assert leader is not None, "nobody leads before the stream fills"
        refused_before = load.summary.rejected[503]
        for name in HANDLERS:
            cluster.kill(name, signal.SIGTERM)
        for name in HANDLERS:
            await cluster.wait_exit(name, 30.0)
        filling = time.time()
        row.notes["cap_mib"] = round(await self._cap_stream(FILL_ROOM) / (1 << 20), 1)
        burst = LoadGenerator(cluster.process("gateway").url, BURST)
        stop_burst = anyio.Event()
        self._tg.start_soon(burst.run, stop_burst)
        with anyio.move_on_after(STREAM_FILL_BOUND):
            await load.wait_refused(503, refused_before + FULL_REFUSALS)
        stop_burst.set()
        await burst.wait_stopped()
        self._extra.append((row, list(burst.summary.accepted)))
        refused = load.summary.rejected[503] - refused_before
        row.notes["refused_503"] = refused
        row.notes["fill_s"] = round(time.time() - filling, 1)
        if refused < FULL_REFUSALS:
            row.problems.append(
                f"the gateway answered {refused} 503s in {STREAM_FILL_BOUND:.0f} s with every "
                "handler stopped: the stream did not push back"
            )
        await self._cap_stream(None)
        back = time.time()
        for name in HANDLERS:
            await cluster.start_handler(name, ready=False)
        await self.consumed_again(
            row, range(cluster.partitions), back, TAKEOVER_BOUND, "every partition"
        )
        await self.settle(HANDLERS)
        after = await cluster.active_leader()
        if after != leader:
            why = [
                e.get("msg", "")
                for e in cluster.process(leader[0]).log_events()
                if float(e.get("ts", 0)) >= filling
                and (e.get("level") != "info" or str(e.get("msg", "")).startswith("lease of"))
            ]
            row.problems.append(
                f"leadership changed while the stream was full: {leader} -> {after}; "
                f"{leader[0]} logged: {why[-5:]}"
            )
        return row

    async def _cap_stream(self, room: int | None) -> int:
        """Set the data stream's cap to the bytes it holds plus ``room`` (None: back to
        ``FAULT_STREAM_CAP``, what its processes configure); the cap set."""
        nc = await nats.connect(self.servers["nats"].url)
        try:
            js = nc.jetstream()
            info = await js.stream_info(self.cluster.setting("SHOAL_NATS_STREAM"))
            config = info.config
            used = info.state.bytes or 0
            config.max_bytes = FAULT_STREAM_CAP if room is None else used + room
            await js.update_stream(config)
            return config.max_bytes
        finally:
            await nc.close()

    async def release_refused(self, victim: str = "h6", joiner: str = "h7") -> Row:
        """Redis: the store refuses one handler's hold writes (an ACL makes the hold hash
        read-only to its user; its lease, reports and watches keep working), then a
        handler joins and takes partitions from it. Its releases fail and are retried
        with backoff; once the store accepts them again, the partitions it gave up land
        again within the backoff's cap, and nothing is lost."""
        row = self._begin("release refused by the store, then accepted")
        cluster = self.cluster
        admin = self._redis_admin()
        user, password = f"shoal-{victim}", uuid.uuid4().hex
        everything = ["resetkeys", "~*", "resetchannels", "&*", "+@all"]
        await admin.execute_command("ACL", "SETUSER", user, "on", f">{password}", *everything)
        try:
            host, port = self.servers["redis"].endpoint.split(",")[0].rsplit(":", 1)
            url = f"redis://{user}:{password}@{host}:{port}"
            await cluster.start_handler(victim, ready=False, env={"SHOAL_REDIS_URL": url})
            before = await self.settle((*HANDLERS, victim))
            given = partitions_of(before, victim)
            await admin.execute_command("ACL", "SETUSER", user, *self._all_but_holds())
            refused_at = time.time()
            await cluster.start_handler(joiner, ready=False)
            moved = await self._moved_away(victim, given)
            first = await self._first_failed_release(victim, since=refused_at)
            if first is None:
                row.problems.append(f"{victim} never failed a release: the fault missed")
            else:
                # The refusal's length is the fault being injected, not a synchronisation.
                await anyio.sleep(max(0.0, first + RELEASE_REFUSAL - time.time()))
            healed_at = time.time()
            await admin.execute_command("ACL", "SETUSER", user, *everything)
            row.notes["failed_releases"] = len(self._failed_releases(victim, refused_at))
            await self.consumed_again(
                row,
                moved,
                healed_at,
                RELEASE_RECOVERY_BOUND,
                f"partitions {sorted(moved)} once the store accepts releases",
            )
            row.notes["moved"] = len(moved)
            for name in (victim, joiner):
                cluster.kill(name, signal.SIGTERM)
            for name in (victim, joiner):
                await cluster.wait_exit(name, 30.0)
            await self.settle(HANDLERS)
        finally:
            with anyio.CancelScope(shield=True):
                await admin.execute_command("ACL", "DELUSER", user)
                await admin.aclose()
        return row

    def _redis_admin(self) -> Any:
        return redis_asyncio.Redis.from_url(self.servers["redis"].url)

    def _all_but_holds(self) -> list[str]:
        """ACL rules: every key of the group writable but the holds (read only). The
        coordination keys are ``{prefix}kv:k:{key}`` (adapters.redis._kv_scripts); the
        holds are the only ones whose key starts with ``h``."""
        with mock.patch.dict(os.environ, self.cluster.settings_env()):
            root = f"{RedisSettings().prefix}kv:"
        writable = [f"{root}k:[^h]*", f"{root}[^k]*", f"{root}keys"]
        return ["resetkeys", *(f"~{k}" for k in writable), f"%R~{root}k:holds/*"]

    async def _moved_away(self, victim: str, given: Collection[int]) -> set[int]:
        """The partitions of ``given`` the next assignment takes from ``victim``."""
        doc = await self.cluster.wait_for(
            lambda d: bool(set(given) - set(partitions_of(d, victim))),
            30.0,
            f"an assignment that takes partitions from {victim}",
        )
        return set(given) - set(partitions_of(doc, victim))

    def _failed_releases(self, victim: str, since: float) -> list[dict[str, Any]]:
        """The releases ``victim`` logged as failed after ``since``."""
        return [
            e
            for e in self.cluster.process(victim).log_events(
                "partition worker failed; handing back and retrying"
            )
            if e.get("phase") == "releasing" and float(e.get("ts", 0)) >= since
        ]

    async def _first_failed_release(self, victim: str, since: float) -> float | None:
        """When ``victim`` first logged a failed release after ``since`` (None if it did
        not within 30 s)."""
        with anyio.move_on_after(30.0):
            while True:  # another process's log file: polled
                if failed := self._failed_releases(victim, since):
                    return min(float(e["ts"]) for e in failed)
                await anyio.sleep(ZONE_POLL)
        return None

    async def server_restarted(self, kind: str, role: str) -> Row:
        """SIGKILL a server the cluster runs on (its data stays: file storage, AOF with an
        fsync per write, Kafka's log) and start it again on the same data: the partitions
        that were landing land again, nothing accepted is lost."""
        row = self._begin(f"{kind} SIGKILL and restart ({role})")
        server = self.servers[kind].process
        assert server is not None, f"the {kind} server is not a local process"
        await self.refresh_zone()
        active = self.landing_partitions(since=time.time() - 30.0)
        if not active:
            row.problems.append("nothing became visible in the 30 s before the fault")
            return row
        killed_at = time.time()
        await anyio.to_thread.run_sync(server.kill)
        # Kafka recovers every partition's log after a SIGKILL before it serves: longer
        # than the 30 s a fresh start gets.
        await anyio.to_thread.run_sync(partial(server.restart, timeout=SERVER_RESTART_BOUND))
        row.notes["down_s"] = round(time.time() - killed_at, 1)
        # Measured from the kill: the server's own start-up is part of the recovery. While
        # it is down no lease is renewed, so a holder's may lapse at its end and be taken
        # over (TAKEOVER_BOUND) a TTL later still.
        await self.consumed_again(
            row,
            active,
            killed_at,
            row.notes["down_s"] + LEASE_TTL + TAKEOVER_BOUND,
            f"partitions after the {kind} restart",
        )
        await self.settle(HANDLERS, within=90.0)
        row.notes["partitions"] = len(active)
        return row

    def landing_partitions(self, since: float) -> set[int]:
        """Partitions with a row that became visible at or after ``since``."""
        table = self.zone.table()
        recent = table.filter(pc.greater_equal(table.column("seen_at"), since))
        return {int(p) for p in pc.unique(recent.column("partition")).to_pylist()}

    # -- one server of a 3-node NATS cluster (the cluster pair) ------------------------------

    async def stream_leader_killed(self) -> Row:
        """SIGKILL the server that leads the data stream, under load: the other two elect a
        leader, the gateway's publishes and the handlers' fetches go on through them, and
        every partition that was landing lands again within the bound while it is down;
        then it is restarted on its data and catches up before the next row."""
        row = self._begin("data stream's leader server SIGKILL (3-node NATS), restarted")
        stream = self.cluster.setting("SHOAL_NATS_STREAM")
        leaders = await self._cluster_whole(row)
        victim = leaders[stream]
        led_bucket = leaders[self._bucket_stream()] == victim
        row.notes["also_led_bucket"] = led_bucket
        bound = BUCKET_LOST_BOUND if led_bucket else SERVER_LOST_BOUND
        await self._server_lost(row, victim, stream, bound)
        return row

    async def follower_killed(self) -> Row:
        """SIGKILL a server that leads neither the data stream nor the coordination bucket
        (the meta leader spared when another server can be picked), under load: only the
        consumers it led elect anew, every partition lands again within the bound while it
        is down; then it is restarted and catches up, so the next row starts whole."""
        row = self._begin("follower server SIGKILL (3-node NATS), restarted")
        leaders = await self._cluster_whole(row)
        nodes = self._nodes()
        meta = nodes.meta_leader()
        followers = [s.name for s in nodes.servers if s.name not in leaders.values()]
        followers.sort(key=lambda name: meta is not None and name == meta.name)
        row.notes["meta_leader"] = bool(meta is not None and followers[0] == meta.name)
        await self._server_lost(row, followers[0], None, SERVER_LOST_BOUND)
        return row

    async def kv_leader_killed_in_rebalance(self, joiner: str = "h4") -> Row:
        """A handler joins, the leader publishes an assignment that gives it partitions,
        and while the handoff is in progress (partitions released and claimed through the
        coordination bucket) the server that leads the bucket is SIGKILLed: the other two
        elect a leader, the handoff completes (every partition held by its owner) and every
        partition lands again within the bound; then the server is restarted and the
        joiner leaves."""
        row = self._begin("coordination bucket's leader server SIGKILL mid-rebalance (3-node NATS)")
        cluster = self.cluster
        bucket = self._bucket_stream()
        leaders = await self._cluster_whole(row)
        victim = leaders[bucket]
        row.notes["also_led_stream"] = leaders[cluster.setting("SHOAL_NATS_STREAM")] == victim
        generation = int((await self.settle(HANDLERS))["generation"])
        await cluster.start_handler(joiner, ready=False)
        doc = await cluster.wait_for(
            lambda d: int(d["generation"]) > generation and bool(partitions_of(d, joiner)),
            60.0,
            f"an assignment that gives {joiner} partitions",
        )
        node = self._node(victim)
        killed_at = time.time()
        await anyio.to_thread.run_sync(node.kill)
        handing_off = sum(1 for e in doc["partitions"] if e["holder"] != e["owner"])
        row.notes.update(server=victim, handing_off=handing_off)
        if not handing_off:
            row.problems.append("the handoff was over before the kill: the fault missed it")
        row.notes["elected_s"] = await self._elected(row, bucket, victim, killed_at)
        everyone = (*HANDLERS, joiner)
        await cluster.wait_for(
            lambda d: settled(d, everyone),
            BUCKET_LOST_BOUND + MARGIN,
            f"{sorted(everyone)} own and hold everything with {victim} down",
        )
        seen = self._seen(lambda d: settled(d, everyone), killed_at) or time.time()
        row.notes["settled_s"] = round(seen - killed_at, 1)
        if seen - killed_at > BUCKET_LOST_BOUND:
            row.problems.append(
                f"the handoff settled {seen - killed_at:.1f} s after the kill "
                f"(bound {BUCKET_LOST_BOUND:.0f} s)"
            )
        row.notes["moved"] = len(partitions_of(doc, joiner))
        await self.waited_past(
            row,
            range(cluster.partitions),
            killed_at,
            BUCKET_LOST_BOUND,
            f"partitions with {victim} down",
        )
        self._lapses(row, killed_at)
        await self._rejoin(row, node)
        cluster.kill(joiner, signal.SIGTERM)
        await cluster.wait_exit(joiner, 30.0)
        await self.settle(HANDLERS, within=90.0)
        return row

    async def _server_lost(self, row: Row, victim: str, led: str | None, bound: float) -> None:
        """SIGKILL the cluster's server ``victim``: every partition lands again, no message
        waiting more than ``bound`` past the kill, while it is down (``led``: a stream it
        led, whose election is noted); then it is restarted and the cluster is whole again."""
        row.notes["server"] = victim
        node = self._node(victim)
        killed_at = time.time()
        await anyio.to_thread.run_sync(node.kill)
        if led is not None:
            row.notes["elected_s"] = await self._elected(row, led, victim, killed_at)
        await self.waited_past(
            row, range(self.cluster.partitions), killed_at, bound, f"partitions with {victim} down"
        )
        self._lapses(row, killed_at)
        await self._rejoin(row, node)
        await self.settle(HANDLERS, within=90.0)

    def _lapses(self, row: Row, since: float) -> None:
        """Note the leases that lapsed after ``since``: handlers that lost theirs (and
        joined again), leaders that lost office (and campaigned again)."""
        logged = {
            "leases_lost": "lease lost: stopped every partition; joining again",
            "offices_lost": "leadership lost; campaigning again",
        }
        for note, msg in logged.items():
            row.notes[note] = sum(
                1
                for proc in self.cluster.processes.values()
                for e in proc.log_events(msg)
                if float(e.get("ts", 0)) >= since
            )

    def _nodes(self) -> NatsCluster:
        if self.nodes is None:
            raise RuntimeError(f"{self.backends} runs on no local NATS cluster")
        return self.nodes

    def _node(self, name: str) -> RunningNats:
        return next(s for s in self._nodes().servers if s.name == name)

    def _bucket_stream(self) -> str:
        """The coordination bucket's stream (``KV_{bucket}``), as the processes name it."""
        with mock.patch.dict(os.environ, self.cluster.settings_env()):
            return "KV_" + NatsKvSettings(group=self.cluster.group).bucket_name

    async def _leaders(self, streams: Collection[str]) -> dict[str, tuple[str | None, bool]]:
        """Each stream's leader (a server's name, None while it has none or does not
        answer) and whether every replica is current, as the running servers tell."""
        urls = [s.url for s in self._nodes().servers if s.running()]
        found: dict[str, tuple[str | None, bool]] = dict.fromkeys(streams, (None, False))
        try:
            nc = await nats.connect(servers=urls, connect_timeout=2.0, allow_reconnect=False)
        except (nats.errors.Error, OSError, TimeoutError):
            return found
        try:
            js = nc.jetstream(timeout=2.0)
            for stream in streams:
                try:
                    info = await js.stream_info(stream)
                except (nats.errors.Error, TimeoutError):
                    continue
                state = info.cluster
                if state is None or not state.leader:
                    continue
                replicas = state.replicas or []
                peers = len(self._nodes().servers) - 1
                whole = len(replicas) == peers and all(r.current for r in replicas)
                found[stream] = (state.leader, whole)
        finally:
            await nc.close()
        return found

    async def _cluster_whole(self, row: Row, within: float = CLUSTER_WHOLE_BOUND) -> dict[str, str]:
        """Once every server runs and the data stream and the coordination bucket each have
        a leader and every replica current: their leaders by stream name."""
        streams = (self.cluster.setting("SHOAL_NATS_STREAM"), self._bucket_stream())
        servers = self._nodes().servers
        found: dict[str, tuple[str | None, bool]] = {}
        with anyio.move_on_after(within):
            while True:
                found = await self._leaders(streams)
                if all(s.running() for s in servers) and all(w for _, w in found.values()):
                    return {stream: str(leader) for stream, (leader, _) in found.items()}
                await anyio.sleep(ZONE_POLL)
        raise TimeoutError(f"{row.fault}: the cluster not whole within {within:.0f} s: {found}")

    async def _elected(self, row: Row, stream: str, old: str, since: float) -> float | None:
        """Seconds from ``since`` until ``stream`` has a leader other than ``old``."""
        with anyio.move_on_after(NATS_ELECTION + MARGIN):
            while True:
                leader, _ = (await self._leaders([stream]))[stream]
                if leader is not None and leader != old:
                    return round(time.time() - since, 1)
                await anyio.sleep(0.2)
        row.problems.append(f"{stream}: no leader {NATS_ELECTION + MARGIN:.0f} s after the kill")
        return None

    async def _rejoin(self, row: Row, node: RunningNats) -> None:
        """Restart ``node`` on its data; the seconds until the cluster is whole again."""
        restarted = time.time()
        await anyio.to_thread.run_sync(partial(node.restart, timeout=CLUSTER_WHOLE_BOUND))
        await self._cluster_whole(row)
        row.notes["rejoined_s"] = round(time.time() - restarted, 1)

    async def poison_message(self) -> Row:
        """A message no handler can land (a record from another producer whose timestamp
        no landing table can date) is dead-lettered while its partition keeps landing;
        ``shoal dlq list`` and ``show`` find it, ``replay`` puts it back on its partition
        (where it dies again: it is still poison), ``purge`` drops it, and an unknown id
        changes nothing."""
        row = self._begin("poison message; shoal dlq list/show/replay/purge")
        cluster = self.cluster
        project = "poison-project"
        partition = partition_for(project, cluster.partitions)
        poison = Envelope(
            message_id=f"poison-{uuid.uuid4().hex[:12]}",
            project_id=project,
            partition=partition,
            gateway_id="another-producer",
            sequence=0,
            received_at=1e20,
            payload=b'{"poison": true}',
        )
        injected_at = time.time()
        async with self._transport() as transport:
            await transport.publish([poison])
        first = await self._dead_letter_listed(poison.message_id, ())
        row.notes["dead_lettered_s"] = round(time.time() - injected_at, 1)
        if first["reason"] != "unprocessable" or first["partition"] != partition:
            row.problems.append(f"listed as {first}")
        # The partition keeps landing (every partition does: the poison is out of the way).
        await self.consumed_again(
            row, [partition], injected_at, RESUME_BOUND, f"partition {partition} behind the poison"
        )
        shown = await cluster.cli("dlq", "show", poison.message_id)
        if shown.code != 0 or json.loads(shown.out)["payload"] != '{"poison": true}':
            row.problems.append(f"dlq show: exit {shown.code} {shown.out[:200]} {shown.err}")
        unknown = await cluster.cli("dlq", "replay", poison.message_id, "no-such-message")
        if unknown.code != 2 or "no-such-message" not in unknown.err:
            row.problems.append(f"replay of an unknown id: exit {unknown.code} {unknown.err}")
        if [letter["position"] for letter in await self._dead_letters()] != [first["position"]]:
            row.problems.append("a refused replay changed the dead letters")
        replayed = await cluster.cli("dlq", "replay", poison.message_id)
        if replayed.code != 0 or "replayed 1 message" not in replayed.out:
            row.problems.append(f"dlq replay: exit {replayed.code} {replayed.out} {replayed.err}")
        # Back on its partition, still poison: dead-lettered again, at a new position.
        await self._dead_letter_listed(poison.message_id, (first["position"],))
        purged = await cluster.cli("dlq", "purge", "--all")
        if purged.code != 0 or await self._dead_letters():
            row.problems.append(f"dlq purge --all: exit {purged.code} {purged.out} {purged.err}")
        row.notes["partition"] = partition
        return row

    def _transport(self) -> Any:
        """The cluster's transport, configured as its processes are (unentered)."""
        with mock.patch.dict(os.environ, self.cluster.settings_env()):
            backends = Backends()
            backends.config.from_dict(
                {
                    "coordination": os.environ["SHOAL_COORDINATION"],
                    "transport": os.environ["SHOAL_TRANSPORT"],
                    "group": os.environ["SHOAL_GROUP"],
                    "partitions": int(os.environ["SHOAL_PARTITIONS"]),
                    "strategy": "sticky",
                }
            )
            return backends.transport()

    async def _dead_letters(self) -> list[dict[str, Any]]:
        listed = await self.cluster.cli("dlq", "list", "--json")
        assert listed.code == 0, f"shoal dlq list: exit {listed.code}: {listed.err}"
        return [json.loads(line) for line in listed.out.splitlines() if line.strip()]

    async def _dead_letter_listed(self, message_id: str, not_at: Collection[int]) -> dict[str, Any]:
        """The listing of ``message_id`` at a position not in ``not_at``, once it appears."""
        with anyio.fail_after(DEAD_LETTER_BOUND):
            while True:
                for letter in await self._dead_letters():
                    if letter["message_id"] == message_id and letter["position"] not in not_at:
                        return letter
                await anyio.sleep(ZONE_POLL)


def cluster_settings(nodes: NatsCluster) -> dict[str, str]:
    """Compose's layout (infra/docker-compose.yml) on ``nodes``: every server's address and
    monitoring port (the fsync check: ``sync_interval: always`` on each), the data stream
    and the coordination's buckets on file storage at three replicas."""
    return {
        "SHOAL_NATS_URL": nodes.url,
        "SHOAL_NATS_MONITOR_URL": ",".join(s.monitor_url for s in nodes.servers),
        "SHOAL_NATS_STORAGE": "file",
        "SHOAL_NATS_REPLICAS": str(len(nodes.servers)),
        "SHOAL_NATS_KV_STORAGE": "file",
        "SHOAL_NATS_KV_REPLICAS": str(len(nodes.servers)),
    }


def ever_committed(zone: str | Path, file: Path) -> bool:
    """Whether a commit in the zone's table log added ``file`` (a compaction may have
    removed it since: the newest version no longer names it, its file stays until the
    vacuum)."""
    wanted = file.relative_to(Path(zone)).as_posix()
    for entry in sorted((Path(zone) / "_delta_log").glob("*.json")):
        for line in entry.read_text().splitlines():
            added = json.loads(line).get("add")
            if added is not None and unquote(added["path"]) == wanted:
                return True
    return False
