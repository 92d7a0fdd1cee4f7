"""Fixtures of the end-to-end tests: isolated clusters on the session's NATS and etcd."""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator
from pathlib import Path

import pytest

from infra.local._testservers import ServerInfo
from tests.e2e._cluster import Cluster

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


@pytest.fixture
def make_cluster(
    nats_server: ServerInfo,
    etcd_server: ServerInfo,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> Iterator[Callable[[str], Cluster]]:
    """``make_cluster("name")``: a Cluster with its own group, stream and data dir, working
    in ``tmp_path / name`` (logs in ``logs/``, the landing zone in ``data/``).

    Every cluster is stopped after the test (no process may be left); when the test
    failed, the tail of every process's log is printed.
    """
    clusters: list[Cluster] = []

    def make(name: str) -> Cluster:
        cluster = Cluster(
            nats_url=nats_server.url, etcd_endpoint=etcd_server.endpoint, work_dir=tmp_path / name
        )
        clusters.append(cluster)
        return cluster

    yield make
    for cluster in clusters:
        cluster.stop()
        if _failed(request.node):
            print(f"\n===== logs of cluster {cluster.group} ({cluster.work_dir}) =====")
            print(cluster.dump_logs())
        if cluster.stop_problems:
            print(f"\nstopping cluster {cluster.group}: " + "; ".join(cluster.stop_problems))
