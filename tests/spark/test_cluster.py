"""``shoal analytics`` on a Spark standalone cluster: the figures ``local[*]`` gives.

A master and two workers of one core each, on 127.0.0.1 (tests/spark/_standalone.py), and
a landing zone on MinIO (a fresh bucket): the planted rows of tests/spark/_landing.py
(losses, a lost tail, duplicates, a refused range, rows landed without a 202), the
gateway's ledger on this machine's disk (``--ledger``: the workers run here, so their
executors read the same path) and five dead letters in a NATS dead-letter stream
(``--dead-letters``: four accepted and never landed, one landed). ``audit`` and ``report``
run as an operator runs them, each a ``shoal`` process, with ``--master spark://...`` and
with ``--master local[*]`` (the two at once): the cluster's runs must give the same figures
(the whole JSON), and their tasks must have run in the workers' executors (the master lists
one more application completed, each worker's work directory holds its executor's log, and
the executors' logs show their tasks, their reads of the zone and the ledger, and Python).

What reaches the executors: Delta's and the s3a connector's jars through ``spark.jars``
(the driver serves them; an executor fetches them when its first task arrives), the s3a
settings (endpoint, keys) through the session's ``spark.hadoop.*`` settings, and the
Python the driver names (``PYSPARK_PYTHON``: this venv's; the report's rebalance window
and the dead letters are Python rows, unpickled on the executors).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest

from adapters.nats import NatsSettings, NatsTransport
from adapters.spark._s3a import s3a_url
from core.messages import Envelope
from core.partitioning import partition_for
from infra.local._testservers import ServerInfo
from tests.contract._nats_streams import delete_streams
from tests.contract._s3 import fresh_bucket, s3_env, settings_for
from tests.contract._transport import fetch_n
from tests.spark._landing import BASE, PARTITIONS, Planted, land, write_ledger
from tests.spark._standalone import StandaloneCluster

LOCAL = "local[*]"
APP_NAME = "shoal-analytics"  # SparkSettings.app_name
C1_ONLY = "-XX:TieredStopAtLevel=1 -XX:+UseParallelGC"  # spark_conf's for a local driver
JVM_OPTIONS = ("spark.driver.extraJavaOptions", "spark.executor.extraJavaOptions")

# (gateway, project, sequence, received_at) dead-lettered: the first four were accepted and
# never landed (planted lost: the ledger's lost 14 becomes lost 10, dead-lettered 4); the
# fifth landed (a dead-letter copy of a landed message stays landed). As in test_audit.py.
DEAD = (
    ("gw-a", "proj-0", 5, BASE + 0.5),
    ("gw-a", "proj-0", 6, BASE + 0.6),
    ("gw-b", "proj-3", 950, BASE + 95.0),
    ("gw-b", "proj-3", 991, BASE + 99.1),
    ("gw-a", "proj-2", 10, BASE + 1.0),
)


@dataclass(frozen=True)
class Zone:
    url: str  # s3://bucket/zone
    ledger: Path
    env: dict[str, str]  # a shoal process's settings: the store, the transport, Spark's IP
    root: Path


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    started = StandaloneCluster(tmp_path_factory.mktemp("spark-cluster"), workers=2, cores=1)
    with started:
        yield started
    assert not started.leftovers, (
        f"processes left running after the cluster stopped: {started.leftovers}"
    )


@pytest.fixture(scope="module")
def zone(
    tmp_path_factory: pytest.TempPathFactory,
    planted: Planted,
    minio_server: ServerInfo,
    nats_server: ServerInfo,
) -> Iterator[Zone]:
    root = tmp_path_factory.mktemp("cluster-zone")
    _, location = fresh_bucket(minio_server)
    url = f"s3://{location.bucket}/{location.prefix}"
    land(url, planted.rows, s3=settings_for(minio_server))
    write_ledger(root / "_ledger", planted.ledger)
    tag = uuid.uuid4().hex[:10]
    nats_env = {
        "SHOAL_TRANSPORT": "nats",
        "SHOAL_NATS_URL": nats_server.url,
        "SHOAL_NATS_STREAM": f"C{tag}",
        "SHOAL_NATS_SUBJECT_PREFIX": f"c{tag}.data",
        "SHOAL_NATS_DEAD_LETTER_STREAM": f"C{tag}_DLQ",
        "SHOAL_NATS_DEAD_LETTER_PREFIX": f"c{tag}.dlq",
    }
    nats = NatsSettings(
        url=nats_server.url,
        stream=nats_env["SHOAL_NATS_STREAM"],
        subject_prefix=nats_env["SHOAL_NATS_SUBJECT_PREFIX"],
        dead_letter_stream=nats_env["SHOAL_NATS_DEAD_LETTER_STREAM"],
        dead_letter_prefix=nats_env["SHOAL_NATS_DEAD_LETTER_PREFIX"],
    )
    anyio.run(dead_letter, nats)
    env = {
        **{k: v for k, v in os.environ.items() if k == "SHOAL_CACHE" or not ours(k)},
        **s3_env(minio_server),
        **nats_env,
        "SHOAL_STATE_DIR": str(root / "state"),  # no running `shoal up` lends its settings
        # The driver's address, as the executors reach it: this machine's loopback.
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_LOCAL_HOSTNAME": "127.0.0.1",
        # The interpreter the executors run Python rows in: the driver's own.
        "PYSPARK_PYTHON": sys.executable,
        # Short jobs in cold JVMs: the C1 compiler alone, as the local driver runs (the
        # cluster's audit here 37 s instead of 63 s); local[*] gets what it has anyway.
        "SHOAL_SPARK_EXTRA_CONF": json.dumps(dict.fromkeys(JVM_OPTIONS, C1_ONLY)),
    }
    try:
        yield Zone(url, root / "_ledger", env, root)
    finally:
        anyio.run(delete_streams, nats)


def ours(name: str) -> bool:
    """A setting of shoal or Spark: the test's own (the jar cache aside)."""
    return name.startswith(("SHOAL_", "SPARK_", "PYSPARK_"))


async def dead_letter(settings: NatsSettings) -> None:
    """Publish the ``DEAD`` messages and dead-letter each as a handler would."""
    envelopes = [
        Envelope(
            message_id=f"{gateway}-{project}-{sequence}",
            project_id=project,
            partition=partition_for(project, PARTITIONS),
            gateway_id=gateway,
            sequence=sequence,
            received_at=received_at,
            payload=b'{"v":%d}' % sequence,
        )
        for gateway, project, sequence, received_at in DEAD
    ]
    async with NatsTransport(settings) as transport:
        await transport.publish(envelopes)
        for partition in sorted({e.partition for e in envelopes}):
            count = sum(e.partition == partition for e in envelopes)
            sub = await transport.open(partition, "h1")
            try:
                for delivery in await fetch_n(sub, count):
                    await delivery.dead_letter("unprocessable")
            finally:
                await sub.close()


def nearly(document: Any) -> Any:
    """``document`` with every float a ``pytest.approx`` of it: a mean's sum may add its
    partial sums in another order on the cluster (within a few ulps)."""
    if isinstance(document, float):
        return pytest.approx(document, rel=1e-12, abs=1e-12)
    if isinstance(document, dict):
        return {key: nearly(value) for key, value in document.items()}
    if isinstance(document, list):
        return [nearly(value) for value in document]
    return document


@dataclass(frozen=True)
class Ran:
    """A ``shoal analytics`` process that ended."""

    code: int
    stdout: str
    stderr: str
    report: Path | None  # the report's report.json

    def json(self) -> dict[str, Any]:
        """The audit's ``--json``, or the report's ``report.json``."""
        text = self.stdout if self.report is None else self.report.read_text("utf-8")
        document: dict[str, Any] = json.loads(text)
        return document


def on_both(
    cluster: StandaloneCluster, zone: Zone, command: str, *options: str, code: int
) -> tuple[Ran, Ran, str]:
    """``shoal analytics COMMAND ZONE OPTIONS --master M --quiet`` with M the cluster and
    ``local[*]``, at once (two processes: each leaves a core idle at times), each to exit
    ``code``. Checked: the cluster's was one application, that ran tasks in an executor on
    each worker, which read the zone through s3a and ran Python. Returns the cluster's
    run, the local one, and the executors' logs."""
    before = {app["id"] for app in cluster.status().get("completedapps", [])}
    started = time.perf_counter()
    running = {}
    for name, master in (("cluster", cluster.master_url), ("local", LOCAL)):
        argv = [sys.executable, "-m", "services.cli.main", "analytics", command, zone.url]
        argv += [*options, "--master", master, "--quiet"]
        report = None
        if command == "report":
            out = zone.root / f"report-{name}"
            argv += ["--out", str(out)]
            report = out / "report.json"
        popen = subprocess.Popen(
            argv, env=zone.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        running[name] = (popen, report)
    ran = {}
    for name, (popen, report) in running.items():
        try:
            stdout, stderr = popen.communicate(timeout=300)
        except subprocess.TimeoutExpired:
            popen.kill()
            stdout, stderr = popen.communicate()
        ran[name] = Ran(popen.returncode, stdout, stderr, report)
    for name, done in ran.items():
        assert done.code == code, f"{command} on {name}: exit {done.code}: {done.stderr}"
    print(f"{command}: on the cluster and local[*] at once, {time.perf_counter() - started:.1f} s")
    status = cluster.status()
    deadline = time.monotonic() + 30  # the master hears of the driver's end (polled)
    while status.get("activeapps") and time.monotonic() < deadline:
        time.sleep(0.2)
        status = cluster.status()
    assert not status.get("activeapps"), status
    apps = [a for a in status.get("completedapps", []) if a["id"] not in before]
    assert [(a["name"], a["state"]) for a in apps] == [(APP_NAME, "FINISHED")], status
    app = apps[0]["id"]
    logs = []
    for worker in cluster.workers:
        assert worker.work_dir is not None
        found = list((worker.work_dir / app).glob("*/stderr"))
        assert len(found) == 1, f"{worker.work_dir / app}: {found}"  # one executor a worker
        logs.append(found[0].read_text("utf-8", "replace"))
    executors = "\n".join(logs)
    assert "Executor: Running task" in executors, f"no executor of {app} ran a task"
    assert f"Reading File path: {s3a_url(zone.url)}/" in executors  # s3a reached MinIO
    assert "PythonRunner: Starting Python task" in executors  # PYSPARK_PYTHON ran there
    return ran["cluster"], ran["local"], executors


def test_audit_on_the_cluster_gives_the_local_figures(
    cluster: StandaloneCluster, zone: Zone
) -> None:
    clustered, local, executors = on_both(
        cluster,
        zone,
        "audit",
        "--drain-marker",
        "--ledger",
        str(zone.ledger),
        "--dead-letters",
        "--json",
        code=1,  # losses
    )
    assert clustered.json() == local.json()
    figures = {
        "accepted": 11_995,
        "landed": 11_995 - 14 + 5,
        "lost": 14 - 4,
        "dead_lettered": 4,
        "duplicated": 5,
        "refused": 8,
        "unacknowledged": 3,
        "accepted_from": "ledger",
    }
    assert {k: clustered.json()[k] for k in figures} == figures
    # the ledger, read by the executors at the path --ledger names
    assert f"Reading File path: file://{zone.ledger.resolve()}/" in executors


def test_report_on_the_cluster_gives_the_local_figures(
    cluster: StandaloneCluster, zone: Zone
) -> None:
    clustered, local, _ = on_both(cluster, zone, "report", "--partitions", str(PARTITIONS), code=0)
    on_cluster, on_local = clustered.json(), local.json()
    on_cluster.pop("generated_at")
    on_local.pop("generated_at")
    assert on_cluster == nearly(on_local)
    assert on_cluster["summary"]["rows"] == 11_989
    assert on_cluster["summary"]["generations"] == 2
    assert len(on_cluster["rebalances"]["changes"]) > 0
