"""Fixtures of the end-to-end tests: isolated clusters on the session's NATS and etcd."""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator, Mapping
from pathlib import Path

import pytest

from infra.local._handles import RunningNats
from infra.local._testservers import ServerInfo
from tests.contract._s3 import fresh_bucket, s3_env, settings_for
from tests.e2e._cluster import ACK_WAIT, Cluster, delete_cluster_topics

_REPORTS = pytest.StashKey[dict[str, pytest.TestReport]]()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Keep each phase's report on the item, so a fixture knows whether the test failed."""
    report = yield
    item.stash.setdefault(_REPORTS, {})[report.when] = report
    return report


def _failed(item: pytest.Item) -> bool:
    reports = item.stash.get(_REPORTS, {})
    return any(r.failed for r in reports.values())


KAFKA_CONNECT_TIMEOUT = 30.0  # seconds a process waits for its topics at start
E2E_STREAM_CAP = 64 << 20  # bytes: each cluster's data stream (SHOAL_NATS_MAX_BYTES)


def backend_env(
    request: pytest.FixtureRequest, coordination: str, transport: str
) -> Callable[[str], dict[str, str]]:
    """The SHOAL_* settings that point a cluster at the session's servers for one backend
    combination; names that must be unique per cluster get the cluster's suffix. Servers
    are asked for lazily, so a run of etcd+nats never starts Kafka."""

    def server(kind: str) -> ServerInfo:
        info: ServerInfo = request.getfixturevalue(f"{kind}_server")
        return info

    def monitor(nats: ServerInfo) -> dict[str, str]:
        """The local server's monitoring port: processes check it fsyncs each write."""
        if isinstance(nats.process, RunningNats):
            return {"SHOAL_NATS_MONITOR_URL": nats.process.monitor_url}
        return {}

    def env(suffix: str) -> dict[str, str]:
        values = {"SHOAL_COORDINATION": coordination, "SHOAL_TRANSPORT": transport}
        if coordination == "etcd":
            values["SHOAL_ETCD_ENDPOINTS"] = server("etcd").endpoint
        if coordination == "redis":
            values["SHOAL_REDIS_URL"] = server("redis").url
        if "kafka" in (coordination, transport):
            values["SHOAL_KAFKA_BOOTSTRAP_SERVERS"] = server("kafka").endpoint
            values["SHOAL_KAFKA_TOPIC"] = f"e2e.{suffix}.data"
            values["SHOAL_KAFKA_DEAD_LETTER_TOPIC"] = f"e2e.{suffix}.dlq"
            values["SHOAL_KAFKA_REGISTRATION_TOPIC"] = f"e2e.{suffix}.reg"
            # A cluster's topics are new, created as its processes start; on a loaded
            # two-core machine the broker took over 10 s (the default) to lead them all.
            values["SHOAL_KAFKA_CONNECT_TIMEOUT"] = str(KAFKA_CONNECT_TIMEOUT)
        if "nats" in (coordination, transport):
            values |= {"SHOAL_NATS_URL": server("nats").url, **monitor(server("nats"))}
        if transport == "nats":
            values |= {
                "SHOAL_NATS_STREAM": f"E2E_{suffix}",
                "SHOAL_NATS_SUBJECT_PREFIX": f"e2e.{suffix}",
                "SHOAL_NATS_DEAD_LETTER_STREAM": f"E2E_DLQ_{suffix}",
                "SHOAL_NATS_DEAD_LETTER_PREFIX": f"e2edlq.{suffix}",
                "SHOAL_NATS_ACK_WAIT": str(ACK_WAIT),
                # nats-server reserves a stream's cap out of its max_file_store: the
                # default 1 GiB for each of a session's clusters would reserve tens of GiB
                # of one test server; a run's load stays far below this (trimmed at half).
                "SHOAL_NATS_MAX_BYTES": str(E2E_STREAM_CAP),
            }
        return values

    return env


@pytest.fixture
def make_cluster(
    tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[Callable[..., Cluster]]:
    """``make_cluster("name", coordination="etcd", transport="nats")``: a Cluster with its own
    group, stream/topic and data dir, working in ``tmp_path / name`` (logs in ``logs/``, the
    landing zone in ``data/``).

    Every cluster is stopped after the test (no process may be left); when the test
    failed, the tail of every process's log is printed.
    """
    clusters: list[Cluster] = []

    def make(
        name: str,
        coordination: str = "etcd",
        transport: str = "nats",
        landing: str = "disk",
        store: ServerInfo | None = None,
        partitions: int = 128,
        settings: Mapping[str, str] | None = None,
    ) -> Cluster:
        """``landing="s3"``: the handlers land in a fresh bucket of ``store`` (default: the
        session's MinIO). ``settings``: more SHOAL_* variables for every process."""
        env: dict[str, str] = dict(settings or {})
        zone: str | None = None
        s3 = None
        if landing == "s3":
            minio: ServerInfo = store or request.getfixturevalue("minio_server")
            s3 = settings_for(minio)
            env |= s3_env(minio)
            zone = f"s3://{fresh_bucket(minio)[1].bucket}/zone"
        cluster = Cluster(
            backend_env=backend_env(request, coordination, transport),
            work_dir=tmp_path / name,
            partitions=partitions,
            env=env,
            landing=zone,
            s3=s3,
        )
        clusters.append(cluster)
        if "kafka" in (coordination, transport):
            kafka: ServerInfo = request.getfixturevalue("kafka_server")
            kafka_of[cluster.suffix] = kafka.endpoint
        return cluster

    kafka_of: dict[str, str] = {}
    yield make
    for cluster in clusters:
        cluster.stop()
        if endpoint := kafka_of.get(cluster.suffix):
            # The session's broker outlives the test; one that kept every test's topics
            # would take minutes to recover its logs when the fault suite restarts it.
            delete_cluster_topics(endpoint, cluster.suffix)
        if _failed(request.node):
            print(f"\n===== logs of cluster {cluster.group} ({cluster.work_dir}) =====")
            print(cluster.dump_logs())
        if cluster.stop_problems:
            print(f"\nstopping cluster {cluster.group}: " + "; ".join(cluster.stop_problems))
