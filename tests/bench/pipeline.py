"""The pipeline benchmark: shoal end to end against plain clients, in one run on one machine.

    python -m tests.bench.pipeline [--messages N] [--quick] [--transports nats,kafka]
                                   [--modes durable,relaxed] [--no-rebalance] [--json FILE]
                                   [--baseline REV] [--profile DIR]

For every transport and mode it runs, on the same fresh servers:

- shoal: HTTP gateway -> broker -> 2 handlers -> Parquet (etcd coordination, a leader; the
  CI gate, ``tests/bench/test_gate.py``, runs the default pair: NATS KV coordination),
  ``--messages`` messages of about 200 bytes posted as NDJSON batches of 100 by 16
  concurrent clients over 1,000 projects; timed from the first POST to the modification
  time of the last Parquet file once every accepted message (by ``message_id``) is in a
  file under its final name;
- raw: the same count and size with no shoal code (``tests.bench.raw_nats``,
  ``tests.bench.raw_kafka``): one producer
  process (per-message async publish / send), two consumer processes (one pull consumer per
  partition, fetch + ack / getmany + commit), 128 partitions; timed from the producer's
  first publish to the last consumer's last ack.

Beside messages per second, each pipeline's **CPU cost**: the CPU seconds every process
of it used (its servers included: the broker, and the coordination store for shoal) per
100,000 messages, read from ``/proc`` (shoal's processes and the servers) and from the
plain clients' own ``time.process_time`` between the load's start and the last message
landed. Unlike a rate it holds across machines of other speeds. ``--baseline REV``:
shoal's services of another commit (a git worktree of REV, removed after) run the same
figures on the same servers in the same run, so a change's effect is measured at one time
on one machine.

Modes: durable (nats-server ``sync_interval: always``, shoal up's default; Kafka
``log.flush.interval.messages=1``) and relaxed (both servers' default sync). Then, on NATS
durable: rows per file and latency at 200 messages/s, rebalance timings (join, SIGTERM,
SIGKILL) at 128 partitions, and resident memory of every process (VmRSS, the peak VmHWM,
and the process's own RssAnon). Prints one table; targets are shown, not asserted (the CI gate is
``tests/bench/test_gate.py``). ``--quick``: 20,000 messages and 30 s at 200 msgs/s.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePath, PurePosixPath
from typing import Any

import anyio
import anyio.to_thread
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake import DeltaTable
from deltalake.exceptions import DeltaError
from pydantic import SecretStr
from rich.console import Console
from rich.table import Table

from adapters.s3 import S3Location, S3Settings
from adapters.s3.client import s3_client
from infra.local.kafka import start_kafka
from infra.local.servers import RunningMinio, RunningServer, start_etcd, start_minio, start_nats
from services.cli.devices import LoadGenerator, LoadPlan
from services.common.settings import HandlerSettings
from services.common.table import landed_table
from tests.bench.profiles import profiled, top_frames
from tests.e2e._cluster import Cluster, member_ids, partitions_of, settled

PARTITIONS = 128
MESSAGE_BYTES = 200
HANDLERS = ("h1", "h2")
STEADY_RATE = 200  # msgs/s
STEADY_SECONDS = 60  # a few rolls per handler, not only the tail (--quick: 30)
REBALANCE_RATE = 2_000  # msgs/s of load while handlers join, leave and crash
HOLD_ALONE = 10.0  # seconds the last handler runs with every partition before its RSS is read
REPO = Path(__file__).resolve().parents[2]
# The handlers' own defaults (the Cluster passes no SHOAL_HANDLER_ROLL_* or lease settings);
# not HandlerSettings(), which would read this process's environment.
ROLL_AGE = float(HandlerSettings.model_fields["roll_age"].default)
LEASE_TTL = float(HandlerSettings.model_fields["lease_ttl"].default)
# A partition's first rows fetched within 4 fetch timeouts of its claim roll early, as a
# moved partition's backlog (a small file): load starts after that window, so the figures
# are the steady state's, not the cold start's.
SETTLE = 4 * float(HandlerSettings.model_fields["fetch_timeout"].default) + 1.0


@dataclass
class Memory:
    """Resident memory of one process in MB: now (VmRSS), its peak (VmHWM), and how much of
    it now is the process's own (RssAnon: its heap and stacks; the rest is mapped files,
    mostly shared libraries' pages, which every process of the host maps once)."""

    rss: float
    peak: float
    anon: float = 0.0

    def __str__(self) -> str:
        return f"{self.rss:.0f} ({self.peak:.0f}, own {self.anon:.0f})"


@dataclass
class Throughput:
    transport: str
    mode: str
    messages: int
    shoal_rate: float
    accepted_rate: float  # the gateway's: messages / (last 202 - first POST)
    raw_rate: float
    median_file_rows: float
    p10_file_rows: float
    files: int
    duplicates: int
    latency_p50: float
    latency_p99: float
    memory: dict[str, Memory] = field(default_factory=dict)
    shoal_cpu: float = 0.0  # CPU seconds per 100,000 messages, every process and server
    raw_cpu: float = 0.0
    baseline: Baseline | None = None
    shoal_cpu_by: dict[str, float] = field(default_factory=dict)  # per 100k, per process
    gateway_alone: GatewayAlone | None = None

    @property
    def ratio(self) -> float:
        return self.shoal_rate / self.raw_rate if self.raw_rate else 0.0


@dataclass
class Baseline:
    """The same figure from another commit's services (``--baseline``)."""

    rev: str
    shoal_rate: float
    shoal_cpu: float
    memory: dict[str, Memory] = field(default_factory=dict)
    gateway_alone: GatewayAlone | None = None
    median_file_rows: float = 0.0
    p10_file_rows: float = 0.0
    latency_p50: float = 0.0
    latency_p99: float = 0.0


@dataclass
class Steady:
    rate: float
    rows: int
    median_file_rows: float
    p10_file_rows: float
    latency_p50: float
    latency_p99: float


@dataclass
class Rebalance:
    join_s: float  # the leader lists the new handler as a member -> its first landed row
    join_from_start_s: float  # the process is spawned -> its first landed row
    leave_s: float
    crash_s: float
    alone: Memory  # the last handler, holding every partition


# -- the landing zone ------------------------------------------------------------------


@dataclass(frozen=True)
class Landing:
    """A landing zone on S3: ``zone`` (s3://bucket/prefix), the processes' SHOAL_S3_* and
    this process's settings."""

    zone: str
    env: dict[str, str]
    s3: S3Settings


COLUMNS = ["message_id", "received_at"]


@dataclass
class Zone:
    """The landed files, read once each (files are never rewritten once visible). A file's
    time is when the commit that added it was made (the Delta log's modification time)."""

    data_dir: Path | str
    s3: S3Settings | None = None
    files: dict[PurePath, tuple[int, float]] = field(default_factory=dict)  # rows, mtime
    ids: set[str] = field(default_factory=set)  # distinct message_id landed
    rows: int = 0
    delays: dict[PurePath, list[float]] = field(default_factory=dict)  # visible - received
    # The table as last read, brought forward by each refresh: a fresh open every 0.2 s
    # (on S3 a listing and a read of every commit since the checkpoint) took CPU from the
    # pipeline under measurement.
    snapshot: DeltaTable | None = None
    client: Any = None  # the S3 client files are read through, made once

    def latencies(self, files: Iterable[PurePath]) -> tuple[float, float]:
        """p50 and p99 of (file visible - message received at the gateway) over ``files``'
        rows, in seconds."""
        values = sorted(d for path in files for d in self.delays[path])
        if not values:
            return 0.0, 0.0
        return values[len(values) // 2], values[min(len(values) - 1, int(len(values) * 0.99))]

    async def refresh(self) -> int:
        """Read the files committed since; the count of distinct messages landed. (Only
        files the landed table names are data: ``services.common.table``.)"""
        committed = await anyio.to_thread.run_sync(self._committed)
        for name, mtime in committed.items():
            key = PurePosixPath(name) if self.s3 else Path(self.data_dir) / name
            if key not in self.files:
                table = await anyio.to_thread.run_sync(self._read, name)
                self.files[key] = (table.num_rows, mtime)
                self.rows += table.num_rows
                self.ids.update(table.column("message_id").to_pylist())
                micros = pc.cast(table.column("received_at"), "int64").to_pylist()
                self.delays[key] = [mtime - us / 1e6 for us in micros]
        return len(self.ids)

    def _committed(self) -> dict[str, float]:
        """Each file of the table's newest version, with its commit time."""
        if self.snapshot is not None:
            try:
                self.snapshot.update_incremental()
            except DeltaError:  # the commits after it were cleaned from the log: open anew
                self.snapshot = None
        if self.snapshot is None:
            self.snapshot = landed_table(self.data_dir, self.s3)
            if self.snapshot is None:
                return {}
        actions = pa.table(self.snapshot.get_add_actions(flatten=True)).to_pydict()
        return {
            path: at / 1000
            for path, at in zip(actions["path"], actions["modification_time"], strict=True)
        }

    def _read(self, name: str) -> pa.Table:
        if self.s3 is None:
            return pq.read_table(Path(self.data_dir) / name, columns=COLUMNS)
        where = S3Location.parse(str(self.data_dir))
        if self.client is None:
            self.client = s3_client(self.s3)
        answer = self.client.get_object(Bucket=where.bucket, Key=where.key(name))
        return pq.read_table(pa.BufferReader(answer["Body"].read()), columns=COLUMNS)

    @property
    def duplicates(self) -> int:
        return self.rows - len(self.ids)

    def since(self, start: float, end: float = float("inf")) -> dict[PurePath, tuple[int, float]]:
        return {p: v for p, v in self.files.items() if start <= v[1] < end}

    async def until_rows(self, rows: int, within: float) -> None:
        with anyio.fail_after(within):
            # Files on disk are the outcome, written by other processes: nothing to await.
            while await self.refresh() < rows:  # noqa: ASYNC110
                await anyio.sleep(0.2)


def file_rows(files: Mapping[PurePath, tuple[int, float]]) -> tuple[float, float]:
    counts = sorted(rows for rows, _ in files.values())
    if not counts:
        return 0.0, 0.0
    return statistics.median(counts), counts[max(0, int(len(counts) * 0.1) - 1)]


def memory_of(pid: int) -> Memory:
    """Resident memory of ``pid`` now (VmRSS), at its peak (VmHWM) and its own (RssAnon), in
    MB."""
    found = {"VmRSS": 0.0, "VmHWM": 0.0, "RssAnon": 0.0}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in found:
            found[key] = int(value.split()[0]) / 1024  # kB
    return Memory(found["VmRSS"], found["VmHWM"], found["RssAnon"])


_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_of(pid: int) -> float:
    """CPU seconds (user and system, all threads) ``pid`` has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS  # utime, stime: fields 14 and 15


def cpu_per_100k(seconds: float, messages: int) -> float:
    return seconds * 100_000 / messages if messages else 0.0


# -- servers -----------------------------------------------------------------------------


@dataclass
class Servers:
    etcd: str | None = None  # shoal's coordination store; None: NATS KV on the nats-server
    nats: str | None = None
    kafka: str | None = None
    pids: dict[str, int] = field(default_factory=dict)  # server -> pid, the store's included

    @property
    def coordination(self) -> str:
        """``SHOAL_COORDINATION``: etcd when there is one, else NATS KV (the default)."""
        return "nats" if self.etcd is None else "etcd"

    def broker_pid(self, transport: str) -> int:
        return self.pids[transport]

    def shoal_pids(self, transport: str) -> dict[str, int]:
        """The servers shoal runs on with ``transport``, by name, each once (NATS KV and a
        NATS transport share one nats-server)."""
        return {kind: self.pids[kind] for kind in dict.fromkeys((self.coordination, transport))}


@contextmanager
def servers_for(
    mode: str, transports: list[str], etcd: RunningServer | None = None
) -> Iterator[Servers]:
    """Fresh brokers for ``transports`` in ``mode``; shoal coordinates on ``etcd``, or
    without one on NATS KV (the default pair: ``SHOAL_COORDINATION=nats``) on a nats-server
    started for it too when no transport needs one (NATS KV + Kafka)."""
    durable = mode == "durable"
    started: list[Any] = []
    try:
        found = Servers()
        if etcd is not None:
            assert etcd.pid is not None
            found = Servers(etcd=etcd.endpoint, pids={"etcd": etcd.pid})
        if "nats" in transports or found.coordination == "nats":
            nats = start_nats(sync_always=durable)
            started.append(nats)
            found.nats = nats.url
            assert nats.pid is not None
            found.pids["nats"] = nats.pid
        if "kafka" in transports:
            config = {"log.flush.interval.messages": "1"} if durable else {}
            kafka = start_kafka(config=config, heap=("512m", "1g"))
            started.append(kafka)
            found.kafka = kafka.endpoint
            assert kafka.pid is not None
            found.pids["kafka"] = kafka.pid
        yield found
    finally:
        for server in reversed(started):
            server.stop()


def backend_env(transport: str, servers: Servers) -> Callable[[str], dict[str, str]]:
    def env(suffix: str) -> dict[str, str]:
        values = {"SHOAL_COORDINATION": servers.coordination, "SHOAL_TRANSPORT": transport}
        if servers.etcd is not None:
            values["SHOAL_ETCD_ENDPOINTS"] = servers.etcd
        if servers.coordination == "nats":  # the KV bucket is the group's: shoal_{group}
            assert servers.nats is not None
            values["SHOAL_NATS_URL"] = servers.nats
        if transport == "nats":
            assert servers.nats is not None
            values |= {
                "SHOAL_NATS_URL": servers.nats,
                "SHOAL_NATS_STREAM": f"B_{suffix}",
                "SHOAL_NATS_SUBJECT_PREFIX": f"b.{suffix}",
                "SHOAL_NATS_DEAD_LETTER_STREAM": f"B_DLQ_{suffix}",
                "SHOAL_NATS_DEAD_LETTER_PREFIX": f"bdlq.{suffix}",
            }
        else:
            assert servers.kafka is not None
            values |= {
                "SHOAL_KAFKA_BOOTSTRAP_SERVERS": servers.kafka,
                "SHOAL_KAFKA_TOPIC": f"b.{suffix}.data",
                "SHOAL_KAFKA_DEAD_LETTER_TOPIC": f"b.{suffix}.dlq",
                "SHOAL_KAFKA_REGISTRATION_TOPIC": f"b.{suffix}.reg",
            }
        return values

    return env


# -- the raw baselines -------------------------------------------------------------------


def share(messages: int, partitions: int, first: int, last: int) -> int:
    """How many of ``messages`` (message i on partition i % partitions) land on first..last."""
    return sum(len(range(p, messages, partitions)) for p in range(first, last + 1))


def _spawn(module: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", f"tests.bench.{module}", *args],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )


def _expect(proc: subprocess.Popen[str], word: str) -> str:
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith(word):
            return line[len(word) :].strip()
    raise RuntimeError(f"{proc.args!r} exited ({proc.wait()}) before printing {word!r}")


def raw_rate(transport: str, servers: Servers, messages: int) -> tuple[float, float]:
    """Messages per second of the plain-client pipeline and the CPU seconds it used, its
    broker's included (blocking: run in a thread)."""
    name = f"RAW{os.getpid()}{time.monotonic_ns() % 1_000_000}"
    where = servers.nats if transport == "nats" else servers.kafka
    assert where is not None
    target = name if transport == "nats" else name.lower()
    spawned: list[subprocess.Popen[str]] = []

    def spawn(*args: str) -> subprocess.Popen[str]:
        spawned.append(_spawn(f"raw_{transport}", *args))
        return spawned[-1]

    try:
        if spawn("setup", where, target, str(PARTITIONS)).wait() != 0:
            raise RuntimeError(f"{transport} baseline setup failed")
        half = PARTITIONS // 2
        consumers = [
            spawn(
                "consume",
                where,
                target,
                str(first),
                str(last),
                str(share(messages, PARTITIONS, first, last)),
            )
            for first, last in ((0, half - 1), (half, PARTITIONS - 1))
        ]
        cpu = -sum(float(_expect(consumer, "ready")) for consumer in consumers)
        broker = servers.broker_pid(transport)
        cpu -= cpu_of(broker)
        producer = spawn(
            "produce",
            where,
            target,
            str(PARTITIONS),
            str(messages),
            str(MESSAGE_BYTES),
        )
        started, producer_cpu = map(float, _expect(producer, "started").split())
        finished = 0.0
        for consumer in consumers:
            done, consumer_cpu = map(float, _expect(consumer, "done").split())
            finished, cpu = max(finished, done), cpu + consumer_cpu
        cpu += cpu_of(broker) + float(_expect(producer, "finished")) - producer_cpu
        producer.wait(60)
        return messages / (finished - started), cpu
    finally:
        for proc in spawned:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()


# -- shoal -------------------------------------------------------------------------------


async def start_cluster(
    env: Callable[[str], dict[str, str]],
    work: Path,
    landing: Landing | None = None,
    handlers: tuple[str, ...] = HANDLERS,
    repo: Path = REPO,
) -> Cluster:
    cluster = Cluster(
        backend_env=env,
        work_dir=work,
        partitions=PARTITIONS,
        env=landing.env if landing else None,
        landing=landing.zone if landing else None,
        s3=landing.s3 if landing else None,
        repo=repo,
    )
    await cluster.__aenter__()
    try:
        await cluster.start_gateway()
        await cluster.start_leader("leader")
        await cluster.start_handlers(*handlers)
        await cluster.wait_for(
            lambda d: settled(d, set(handlers)), 90, "handlers hold every partition"
        )
        await anyio.sleep(SETTLE)
    except BaseException:
        await cluster.__aexit__(None, None, None)
        raise
    return cluster


def plan(messages: int | None, rate: float | None = None) -> LoadPlan:
    return LoadPlan(
        messages=messages,
        projects=1_000,
        batch=100,
        concurrency=16,
        rate=rate,
        keep_ids=False,
        message_bytes=MESSAGE_BYTES,
    )


@dataclass
class ShoalRun:
    rate: float  # messages per second, end to end
    accepted_rate: float  # by the gateway
    cpu: float  # CPU seconds of every process and server, from the load's start to the end
    zone: Zone
    memory: dict[str, Memory]
    cpu_by: dict[str, float]  # the same per process (handlers, gateway, leader, servers)
    profiles: dict[str, Path]  # process -> its py-spy profile of the run (``--profile``)


# A fresh Kafka broker spent twice the CPU on the first shoal run it served: the same commit
# measured broker 23.7 then 12.6 CPU s per 100k in one run (it created its transaction-state
# topic, then 50 partitions, now 1: infra/local/kafka.py, and compiles those paths). NATS
# showed no such difference. So a Kafka run's shoal figures come after a short unmeasured shoal run.
WARM_UP_MESSAGES = 10_000


async def warm_up(transport: str, servers: Servers, work: Path) -> None:
    """Serve one short, unmeasured shoal run on a fresh Kafka broker (nothing on NATS)."""
    if transport == "kafka":
        await shoal_throughput(transport, servers, WARM_UP_MESSAGES, work)


async def shoal_throughput(
    transport: str,
    servers: Servers,
    messages: int,
    work: Path,
    landing: Landing | None = None,
    repo: Path = REPO,
    profile: Path | None = None,
) -> ShoalRun:
    """Messages per second end to end and accepted by the gateway, the CPU every process
    used, the landed files, and every process's memory once everything landed (on S3 with
    ``landing``); shoal's services from the checkout ``repo``; with ``profile``, a py-spy
    profile of each of shoal's processes from the load's start to the last row, there."""
    cluster = await start_cluster(backend_env(transport, servers), work, landing, repo=repo)
    try:
        gateway = cluster.process("gateway")
        named = {name: proc.pid for name, proc in cluster.processes.items()}
        named |= servers.shoal_pids(transport)
        before = {name: cpu_of(pid) for name, pid in named.items()}
        sampled = {name: proc.pid for name, proc in cluster.processes.items()}
        sampling: AbstractContextManager[dict[str, Path]] = (
            profiled(profile, sampled) if profile else nullcontext({})
        )
        with sampling as profiles:
            started = time.time()
            summary = await LoadGenerator(gateway.url, plan(messages)).run()
            accepted = time.time()
            if summary.accepted_count != messages:
                raise RuntimeError(f"the gateway did not accept everything: {summary.line()}")
            zone = Zone(cluster.zone, landing.s3 if landing else None)
            try:
                await zone.until_rows(messages, within=max(120.0, messages / 200))
            except TimeoutError:
                raise RuntimeError(
                    f"{transport}: {len(zone.ids)} of {messages} messages landed; logs in "
                    f"{cluster.log_dir}\n{cluster.dump_logs(20)}"
                ) from None
        cpu_by = {name: cpu_of(pid) - before[name] for name, pid in named.items()}
        finished = max(mtime for _, mtime in zone.files.values())
        memory = {name: memory_of(proc.pid) for name, proc in cluster.processes.items()}
        return ShoalRun(
            messages / (finished - started),
            messages / (accepted - started),
            sum(cpu_by.values()),
            zone,
            memory,
            cpu_by,
            profiles,
        )
    finally:
        await cluster.__aexit__(None, None, None)


@dataclass
class GatewayAlone:
    """The gateway with no handler running (nothing consumes): what it alone spends to accept."""

    rate: float  # messages accepted per second
    cpu: float  # the gateway's CPU seconds per 100,000 messages accepted


async def gateway_alone(
    transport: str, servers: Servers, messages: int, work: Path, repo: Path = REPO
) -> GatewayAlone:
    """``messages`` posted to a gateway of the checkout ``repo`` with no leader or handler
    running: its own CPU per message accepted, the broker's and the load's left out."""
    cluster = Cluster(
        backend_env=backend_env(transport, servers),
        work_dir=work,
        partitions=PARTITIONS,
        repo=repo,
    )
    async with cluster:
        gateway = await cluster.start_gateway()
        before = cpu_of(gateway.pid)
        started = time.time()
        summary = await LoadGenerator(gateway.url, plan(messages)).run()
        elapsed = time.time() - started
        if summary.accepted_count != messages:
            raise RuntimeError(f"the gateway did not accept everything: {summary.line()}")
        return GatewayAlone(
            messages / elapsed, cpu_per_100k(cpu_of(gateway.pid) - before, messages)
        )


def landing_on(minio: RunningMinio) -> Landing:
    """A fresh bucket on ``minio`` as a landing zone."""
    settings = S3Settings(
        endpoint_url=minio.url,
        region="us-east-1",
        access_key_id=minio.access_key,
        secret_access_key=SecretStr(minio.secret_key),
    )
    s3_client(settings).create_bucket(Bucket="bench")
    return Landing("s3://bench/zone", minio.s3_env(), settings)


def throughput(
    transport: str,
    mode: str,
    messages: int,
    shoal: ShoalRun,
    raw: tuple[float, float],
    baseline: Baseline | None = None,
    alone: GatewayAlone | None = None,
) -> Throughput:
    median, p10 = file_rows(shoal.zone.files)
    p50, p99 = shoal.zone.latencies(shoal.zone.files)
    return Throughput(
        transport,
        mode,
        messages,
        shoal.rate,
        shoal.accepted_rate,
        raw[0],
        median,
        p10,
        len(shoal.zone.files),
        shoal.zone.duplicates,
        p50,
        p99,
        shoal.memory,
        shoal_cpu=cpu_per_100k(shoal.cpu, messages),
        raw_cpu=cpu_per_100k(raw[1], messages),
        baseline=baseline,
        shoal_cpu_by={name: cpu_per_100k(cpu, messages) for name, cpu in shoal.cpu_by.items()},
        gateway_alone=alone,
    )


async def s3_run(
    servers: Servers, messages: int, work: Path, raw: tuple[float, float]
) -> Throughput:
    """NATS durable with the handlers landing on a local MinIO instead of the disk."""
    minio = await anyio.to_thread.run_sync(start_minio)
    try:
        landing = await anyio.to_thread.run_sync(landing_on, minio)
        shoal = await shoal_throughput("nats", servers, messages, work / "nats-durable-s3", landing)
    finally:
        await anyio.to_thread.run_sync(minio.stop)
    return throughput("nats", "durable, on S3", messages, shoal, raw)


async def steady_and_rebalance(
    servers: Servers, work: Path, seconds: float = STEADY_SECONDS, repo: Path = REPO
) -> tuple[Steady, Rebalance]:
    """NATS durable, 2 handlers: ``seconds`` at 200 msgs/s (files, latency); then under a
    steady 2,000 msgs/s a third handler joins, leaves with SIGTERM, h2 is SIGKILLed, and h1
    runs alone with every partition for a while (its memory); shoal's services from the
    checkout ``repo``."""
    cluster = await start_cluster(backend_env("nats", servers), work, repo=repo)
    try:
        gateway = cluster.process("gateway")
        zone = Zone(cluster.data_dir)
        start = time.time()
        count = int(STEADY_RATE * seconds)
        await LoadGenerator(gateway.url, plan(count, rate=STEADY_RATE)).run()
        await zone.until_rows(count, within=ROLL_AGE * 3 + 30)
        window = zone.since(start)
        median, p10 = file_rows(window)
        p50, p99 = zone.latencies(window)
        steady = Steady(STEADY_RATE, len(zone.ids), median, p10, p50, p99)

        stop = anyio.Event()
        async with anyio.create_task_group() as tg:
            tg.start_soon(LoadGenerator(gateway.url, plan(None, rate=REBALANCE_RATE)).run, stop)
            await anyio.sleep(3)
            join, join_from_start = await _join(cluster, zone, "h3")
            leave = await _departure(cluster, zone, "h3", signal.SIGTERM)
            crash = await _departure(cluster, zone, "h2", signal.SIGKILL)
            await cluster.wait_for(lambda d: settled(d, {"h1"}), 60, "h1 holds every partition")
            await anyio.sleep(HOLD_ALONE)
            alone = memory_of(cluster.process("h1").pid)
            stop.set()
        return steady, Rebalance(join, join_from_start, leave, crash, alone)
    finally:
        await cluster.__aexit__(None, None, None)


async def _join(cluster: Cluster, zone: Zone, name: str) -> tuple[float, float]:
    spawned = time.time()
    await cluster.start_handler(name, ready=False)
    await cluster.wait_for(lambda d: name in member_ids(d), 60, f"{name} joined")
    joined = time.time()
    landed = await _first_row(zone, spawned, lambda path, _: path.name.startswith(f"{name}-"))
    return landed - joined, landed - spawned


async def _departure(cluster: Cluster, zone: Zone, name: str, sig: signal.Signals) -> float:
    doc = await cluster.status()
    moved = set(partitions_of(doc, name))
    at = cluster.kill(name, sig)

    def landed_again(path: PurePath, _: float) -> bool:
        if path.name.startswith(f"{name}-"):
            return False
        partitions = pq.read_table(Path(path), columns=["partition"]).column("partition")
        return bool(moved & set(pc.unique(partitions).to_pylist()))

    return await _first_row(zone, at, landed_again) - at


async def _first_row(zone: Zone, since: float, match: Callable[[PurePath, float], bool]) -> float:
    """The modification time of the first file since ``since`` that ``match``es."""
    with anyio.fail_after(120):
        while True:
            await zone.refresh()
            hits = [m for p, (_, m) in zone.since(since).items() if match(p, m)]
            if hits:
                return min(hits)
            await anyio.sleep(0.1)


# -- the report --------------------------------------------------------------------------


def _verdict(value: float, target: float, stretch: float | None = None) -> bool | str:
    if stretch is not None and value >= stretch:
        return "PASS (stretch)"
    return value >= target


def memory_row(memory: Mapping[str, Memory]) -> str:
    """The handler with the highest peak, the gateway and the leader of one run."""
    none = Memory(0, 0)
    handlers = [m for name, m in memory.items() if name.startswith("h")]
    handler = max(handlers, key=lambda m: m.peak, default=none)
    return f"{handler} / {memory.get('gateway', none)} / {memory.get('leader', none)}"


def report(
    console: Console,
    runs: list[Throughput],
    steady: Steady | None,
    rebalance: Rebalance | None,
    before_steady: Steady | None = None,
    before_rebalance: Rebalance | None = None,
) -> None:
    """The table; the steady and rebalance rows name the baseline's figures beside."""
    table = Table(title=f"shoal pipeline benchmark ({os.cpu_count()} cores)")
    for column in ("figure", "value", "target", ""):
        table.add_column(column)

    def row(figure: str, value: str, target: str = "", ok: bool | str | None = None) -> None:
        verdict = ok if isinstance(ok, str) else "" if ok is None else ("PASS" if ok else "MISS")
        table.add_row(figure, value, target, verdict)

    def beside(now: str, before: str | None) -> str:
        return now if before is None else f"{now}; baseline {before}"

    latency_limit = ROLL_AGE + 1
    for run in runs:
        label = f"{run.transport} {run.mode}"
        row(
            f"{label}: shoal end to end (gateway accepted)",
            f"{run.shoal_rate:,.0f} msgs/s ({run.accepted_rate:,.0f}) of {run.messages:,}",
        )
        row(f"{label}: plain client", f"{run.raw_rate:,.0f} msgs/s")
        # Kafka's is issue 32's: at least the plain aiokafka pipeline, in either mode.
        want, stretch = (
            (1.0, None)
            if run.transport == "kafka"
            else (2.0, 4.0)
            if run.mode.startswith("durable")
            else (0.5, 0.8)
        )
        row(
            f"{label}: shoal / plain",
            f"{run.ratio:.2f} x",
            f">= {want} x" + (f" (stretch {stretch} x)" if stretch else ""),
            _verdict(run.ratio, want, stretch),
        )
        row(
            f"{label}: CPU s per 100k messages, shoal / plain",
            f"{run.shoal_cpu:.1f} / {run.raw_cpu:.1f} "
            f"({run.shoal_cpu / run.raw_cpu if run.raw_cpu else 0:.2f} x the plain cost)",
        )
        base = run.baseline
        if base is not None:
            row(
                f"{label}: baseline {base.rev}: msgs/s, CPU s per 100k",
                f"{base.shoal_rate:,.0f} (now {run.shoal_rate / base.shoal_rate:.2f} x), "
                f"{base.shoal_cpu:.1f} (now {run.shoal_cpu / base.shoal_cpu:.2f} x)",
                "CPU <= 1/3 of the baseline's",
                run.shoal_cpu * 3 <= base.shoal_cpu,
            )
        alone = run.gateway_alone
        if alone is not None:
            base_alone = run.baseline.gateway_alone if run.baseline else None
            gain = base_alone.cpu / alone.cpu if base_alone and alone.cpu else None
            row(
                f"{label}: the gateway alone: CPU s per 100k, msgs/s",
                f"{alone.cpu:.2f}, {alone.rate:,.0f}"
                + (
                    f" (baseline {base_alone.cpu:.2f}, {base_alone.rate:,.0f}: "
                    f"{gain:.2f} x the messages per CPU-second)"
                    if base_alone and gain
                    else ""
                ),
                ">= 3 x the baseline's messages per CPU-second" if gain else "",
                None if gain is None else gain >= 3,
            )
        row(
            f"{label}: rows per file (median, p10)",
            beside(
                f"{run.median_file_rows:,.0f}, {run.p10_file_rows:,.0f} "
                f"({run.files} files, {run.duplicates} duplicate rows)",
                None
                if base is None
                else f"{base.median_file_rows:,.0f}, {base.p10_file_rows:,.0f}",
            ),
            ">= 10,000",
            run.median_file_rows >= 10_000,
        )
        row(
            f"{label}: latency under load p50 / p99",
            beside(
                f"{run.latency_p50:.1f} / {run.latency_p99:.1f} s",
                None if base is None else f"{base.latency_p50:.1f} / {base.latency_p99:.1f} s",
            ),
            f"p99 <= {latency_limit:.0f} s",
            run.latency_p99 <= latency_limit,
        )
        row(
            f"{label}: RSS (peak, own) MB handler / gateway / leader",
            beside(memory_row(run.memory), None if base is None else memory_row(base.memory)),
            "peak <= 150 / 80 / 80 MB",
            all(
                m.peak <= (150 if name.startswith("h") else 80)
                for name, m in run.memory.items()
                if name.startswith("h") or name in ("gateway", "leader")
            ),
        )

    if steady is not None:
        earlier = before_steady
        row(
            f"{steady.rate:.0f} msgs/s: rows per file (median, p10)",
            beside(
                f"{steady.median_file_rows:,.0f}, {steady.p10_file_rows:,.0f} "
                f"({steady.rows:,} rows)",
                None
                if earlier is None
                else f"{earlier.median_file_rows:,.0f}, {earlier.p10_file_rows:,.0f}",
            ),
            ">= 1,000",
            steady.median_file_rows >= 1_000,
        )
        row(
            f"{steady.rate:.0f} msgs/s: latency p50 / p99",
            beside(
                f"{steady.latency_p50:.1f} / {steady.latency_p99:.1f} s",
                None
                if earlier is None
                else f"{earlier.latency_p50:.1f} / {earlier.latency_p99:.1f} s",
            ),
            f"p99 <= roll age + 1 = {latency_limit:.0f} s",
            steady.latency_p99 <= latency_limit,
        )
    if rebalance is not None:
        then = before_rebalance
        row(
            "join: member -> its first row (from spawn)",
            beside(
                f"{rebalance.join_s:.2f} s ({rebalance.join_from_start_s:.2f} s)",
                None if then is None else f"{then.join_s:.2f} s ({then.join_from_start_s:.2f} s)",
            ),
            "<= 1 s",
            rebalance.join_s <= 1,
        )
        row(
            "SIGTERM -> its partitions landing again",
            beside(f"{rebalance.leave_s:.2f} s", None if then is None else f"{then.leave_s:.2f} s"),
            "<= 1 s",
            rebalance.leave_s <= 1,
        )
        limit = LEASE_TTL + 1
        row(
            "SIGKILL -> its partitions landing again",
            beside(f"{rebalance.crash_s:.2f} s", None if then is None else f"{then.crash_s:.2f} s"),
            f"<= lease TTL + 1 = {limit:.0f} s",
            rebalance.crash_s <= limit,
        )
        row(
            "RSS (peak, own) of a handler holding 128 partitions",
            beside(f"{rebalance.alone} MB", None if then is None else f"{then.alone} MB"),
            "<= 150 MB",
            rebalance.alone.peak <= 150,
        )
    console.print(table)


def print_profiles(console: Console, run: str, profiles: Mapping[str, Path]) -> None:
    """The top frames of the gateway's and the handlers' profiles of one run, if sampled."""
    handlers = sorted(name for name in profiles if name.startswith("h"))
    for role, names in (("gateway", ["gateway"]), ("handlers", handlers)):
        frames = top_frames(profiles[name] for name in names if name in profiles)
        if frames:
            console.print(f"  {run}, {role}: top frames (share of samples)", markup=False)
            for frame, share in frames:
                console.print(f"    {share:6.1%}  {frame}", markup=False, highlight=False)


def checkout(rev: str, where: Path) -> Path:
    """A detached git worktree of ``rev`` at ``where`` (the caller removes it); exits with
    git's message when ``rev`` names no commit."""
    done = subprocess.run(
        ["git", "worktree", "add", "--detach", str(where), rev],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"error: --baseline {rev}: {done.stderr.strip()}")
    return where


async def run(args: argparse.Namespace) -> dict[str, Any]:
    console = Console(highlight=False, width=150)
    transports = [t for t in args.transports.split(",") if t]
    modes = [m for m in args.modes.split(",") if m]
    runs: list[Throughput] = []
    steady = rebalance = before_steady = before_rebalance = None
    work = Path(tempfile.mkdtemp(prefix="shoal-bench-"))
    baseline_repo = checkout(args.baseline, work / "baseline") if args.baseline else None
    etcd = start_etcd()
    failed = True
    try:
        for mode in modes:
            with servers_for(mode, transports, etcd) as servers:
                for transport in transports:
                    await warm_up(transport, servers, work / f"{transport}-{mode}-warm-up")
                    console.print(f"[bold]{transport} {mode}[/]: plain client ...")
                    raw = await anyio.to_thread.run_sync(
                        raw_rate, transport, servers, args.messages
                    )
                    console.print(f"  {raw[0]:,.0f} msgs/s, {raw[1]:.1f} CPU s; shoal ...")
                    shoal = await shoal_throughput(
                        transport,
                        servers,
                        args.messages,
                        work / f"{transport}-{mode}",
                        profile=args.profile / f"{transport}-{mode}" if args.profile else None,
                    )
                    split = ", ".join(f"{n} {c:.1f}" for n, c in sorted(shoal.cpu_by.items()))
                    console.print(
                        f"  {shoal.rate:,.0f} msgs/s ({shoal.rate / raw[0]:.2f} x), "
                        f"{shoal.cpu:.1f} CPU s ({split})"
                    )
                    alone = await gateway_alone(
                        transport, servers, args.messages, work / f"{transport}-{mode}-gateway"
                    )
                    label = f"{transport} {mode}"
                    print_profiles(console, label, shoal.profiles)
                    console.print(f"  gateway alone: {alone}")
                    baseline = None
                    if baseline_repo is not None:
                        console.print(f"  baseline {args.baseline} ...")
                        before = await shoal_throughput(
                            transport,
                            servers,
                            args.messages,
                            work / f"{transport}-{mode}-baseline",
                            repo=baseline_repo,
                            profile=(
                                args.profile / f"{transport}-{mode}-baseline"
                                if args.profile
                                else None
                            ),
                        )
                        baseline = Baseline(
                            args.baseline,
                            before.rate,
                            cpu_per_100k(before.cpu, args.messages),
                            before.memory,
                            await gateway_alone(
                                transport,
                                servers,
                                args.messages,
                                work / f"{transport}-{mode}-gateway-baseline",
                                repo=baseline_repo,
                            ),
                            *file_rows(before.zone.files),
                            *before.zone.latencies(before.zone.files),
                        )
                        split = ", ".join(f"{n} {c:.1f}" for n, c in sorted(before.cpu_by.items()))
                        console.print(
                            f"  {before.rate:,.0f} msgs/s, {before.cpu:.1f} CPU s ({split})"
                        )
                        then = f"{label}, baseline {args.baseline}"
                        print_profiles(console, then, before.profiles)
                    runs.append(
                        throughput(transport, mode, args.messages, shoal, raw, baseline, alone)
                    )
                    if args.s3 and transport == "nats" and mode == "durable":
                        console.print("[bold]nats durable, landing on S3 (MinIO)[/] ...")
                        runs.append(await s3_run(servers, args.messages, work, raw))
                        console.print(f"  {runs[-1].shoal_rate:,.0f} msgs/s")
                if args.rebalance and mode == "durable" and "nats" in transports:
                    console.print("[bold]nats durable[/]: 200 msgs/s, join, leave, crash ...")
                    steady, rebalance = await steady_and_rebalance(
                        servers, work / "rebalance", args.steady_seconds
                    )
                    console.print(f"  {steady}\n  {rebalance}")
                    if baseline_repo is not None:
                        console.print(f"  baseline {args.baseline} ...")
                        before_steady, before_rebalance = await steady_and_rebalance(
                            servers,
                            work / "rebalance-baseline",
                            args.steady_seconds,
                            repo=baseline_repo,
                        )
                        console.print(f"  {before_steady}\n  {before_rebalance}")
        failed = False
    finally:
        etcd.stop()
        if baseline_repo is not None:
            await anyio.run_process(
                ["git", "worktree", "remove", "--force", str(baseline_repo)], cwd=REPO, check=False
            )
        if failed or args.keep:
            console.print(f"the run's data and logs: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    report(console, runs, steady, rebalance, before_steady, before_rebalance)
    return {
        "runs": [asdict(r) | {"ratio": r.ratio} for r in runs],
        "steady": asdict(steady) if steady else None,
        "rebalance": asdict(rebalance) if rebalance else None,
        "baseline_steady": asdict(before_steady) if before_steady else None,
        "baseline_rebalance": asdict(before_rebalance) if before_rebalance else None,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, help="per figure (default 100,000)")
    parser.add_argument("--quick", action="store_true", help="20,000 messages, 30 s at 200 msgs/s")
    parser.add_argument("--transports", default="nats,kafka")
    parser.add_argument("--modes", default="durable,relaxed")
    parser.add_argument("--no-rebalance", dest="rebalance", action="store_false")
    parser.add_argument(
        "--no-s3", dest="s3", action="store_false", help="skip the run landing on MinIO"
    )
    parser.add_argument("--keep", action="store_true", help="keep the landed files and logs")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument(
        "--baseline",
        metavar="REV",
        help="also run shoal's services of commit REV (a git worktree) on the same servers",
    )
    parser.add_argument(
        "--profile",
        type=Path,
        metavar="DIR",
        help="sample shoal's processes with py-spy in each measured run (raw profiles in DIR) "
        "and print the gateway's and the handlers' top frames",
    )
    args = parser.parse_args(argv)
    if args.messages is None:
        args.messages = 20_000 if args.quick else 100_000
    args.steady_seconds = STEADY_SECONDS / 2 if args.quick else STEADY_SECONDS
    figures = anyio.run(run, args)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
