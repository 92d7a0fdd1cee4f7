"""The fault suite runs clusters the way the e2e tests do (same fixtures), on a Redis that
keeps its data across a restart (AOF, an fsync per write): the store-restart row kills it.
``--fault-rows`` picks the rows (``tests/faults/_matrix.py``): ``all`` (the default),
``tier`` (what ``bin/test`` runs), or ``PAIR`` and ``PAIR:FAULT`` items, comma-separated."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from infra.local._process import ServerStartError
from infra.local._testservers import ServerInfo
from infra.local.servers import NatsCluster, start_nats_cluster, start_redis
from tests._unavailable import needs_local, unavailable
from tests.e2e.conftest import make_cluster, pytest_runtest_makereport
from tests.faults._matrix import commit_number, describe, select

__all__ = ["make_cluster", "nats_cluster", "pytest_runtest_makereport", "redis_server"]

_SELECTION = pytest.StashKey[dict[str, list[str]]]()
_ROOT = Path(__file__).resolve().parents[2]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--fault-rows",
        default="all",
        help="fault rows to run: all, tier, or PAIR / PAIR:FAULT items, comma-separated",
    )


def _selection(config: pytest.Config) -> dict[str, list[str]]:
    if _SELECTION not in config.stash:
        spec = str(config.getoption("--fault-rows", default="all"))
        try:
            config.stash[_SELECTION] = select(spec, commit_number(_ROOT))
        except ValueError as exc:
            raise pytest.UsageError(str(exc)) from None
    return config.stash[_SELECTION]


def pytest_report_header(config: pytest.Config) -> list[str]:
    return describe(_selection(config))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Chosen rows run alone: the soak goes with the whole matrix only."""
    if config.getoption("--fault-rows", default="all") == "all":
        return
    soak = [item for item in items if item.path.name == "test_soak.py"]
    if soak:
        config.hook.pytest_deselected(items=soak)
        items[:] = [item for item in items if item not in soak]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """One test per pair with rows to run (a pair without any is not collected)."""
    if {"pair", "fault_rows"} <= set(metafunc.fixturenames):
        metafunc.parametrize(
            ("pair", "fault_rows"),
            [pytest.param(p, rows, id=p) for p, rows in _selection(metafunc.config).items()],
        )


@pytest.fixture(scope="module")
def nats_cluster(server_mode: str) -> Iterator[NatsCluster]:
    """Three nats-servers routed on loopback, as compose runs them (file storage, an fsync
    per write): the cluster pair's, whose rows SIGKILL and restart one of them. Stopped with
    the module, so that the soak after it does not share the machine with them."""
    if server_mode != "local":
        unavailable(needs_local("nats", server_mode, "kill one server of a 3-node cluster of"))
    try:
        nodes = start_nats_cluster(3, timeout=60.0)
    except (ServerStartError, FileNotFoundError) as exc:
        unavailable(str(exc))
    try:
        yield nodes
    finally:
        nodes.stop()


@pytest.fixture(scope="session")
def redis_server(server_mode: str, request: pytest.FixtureRequest) -> Iterator[ServerInfo]:
    if server_mode != "local":
        unavailable(needs_local("redis", server_mode, "restart"))
    try:
        server = start_redis(
            name="shoal-redis-faults",
            extra_args=("--appendonly", "yes", "--appendfsync", "always"),
        )
    except (ServerStartError, FileNotFoundError) as exc:
        unavailable(str(exc))
    try:
        yield ServerInfo("redis", "local", server.url, server.endpoint, process=server)
    finally:
        server.stop()
