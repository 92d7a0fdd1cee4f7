"""Shared pytest fixtures."""

from __future__ import annotations

from collections.abc import Generator, Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from infra.local._testservers import ServerInfo, ServerUnavailable, provide, select_mode
from tests._lossyfs import LossyMount, missing
from tests._unavailable import NOT_APPLICABLE, unavailable, under_ci


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


# --- no silent skip under CI ---------------------------------------------------------------
# tests/_unavailable.py's unavailable() already fails under CI; this net catches every other
# skip (pytest.skip, a skipif marker, importorskip) whose reason does not say that the check
# does not apply: CI has everything installed, so such a skip only hides an untested path.


def _unexplained_skip(reason: str) -> str | None:
    """The failure message for a skip under CI, or None when the skip is allowed there."""
    if not under_ci() or reason.startswith(NOT_APPLICABLE):
        return None
    return (
        f"skipped under CI: {reason} (a test that cannot run here fails in CI; a check that"
        " does not apply says so with tests/_unavailable.py's not_applicable)"
    )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    skip = call.excinfo.value if call.excinfo is not None else None
    if report.skipped and isinstance(skip, pytest.skip.Exception):  # not an xfail
        failure = _unexplained_skip(skip.msg or "")
        if failure is not None:
            report.outcome, report.longrepr = "failed", failure
    return report


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(
    collector: pytest.Collector,
) -> Generator[None, pytest.CollectReport, pytest.CollectReport]:
    """The same for a whole module skipped at import (its reason reads "Skipped: ...")."""
    report = yield
    if report.skipped and isinstance(report.longrepr, tuple):
        failure = _unexplained_skip(report.longrepr[2].removeprefix("Skipped: "))
        if failure is not None:
            report.outcome, report.longrepr = "failed", failure
    return report


# --- real servers ------------------------------------------------------------------------
# SHOAL_TEST_SERVERS=local|docker|external (default: docker if a daemon answers, else local;
# .ci/run pins local).
# Each server starts once per session, on first use. In local mode `.process` is the
# infra.local.servers handle (kill()/restart()); a test that kills a shared server must
# restart it before it ends. Fresh, private servers: use infra.local.servers directly.


@pytest.fixture(scope="session")
def server_mode() -> str:
    return select_mode()


def _serve(kind: str, mode: str) -> Iterator[ServerInfo]:
    with ExitStack() as stack:
        try:
            info = stack.enter_context(provide(kind, mode))
        except (ServerUnavailable, FileNotFoundError) as exc:
            # FileNotFoundError: local mode found no binary (or Kafka's jars, or Java). Both
            # messages name what is missing and how to get it.
            unavailable(str(exc))
        yield info


@pytest.fixture(scope="session")
def nats_server(server_mode: str) -> Iterator[ServerInfo]:
    yield from _serve("nats", server_mode)


@pytest.fixture(scope="session")
def etcd_server(server_mode: str) -> Iterator[ServerInfo]:
    yield from _serve("etcd", server_mode)


@pytest.fixture(scope="session")
def redis_server(server_mode: str) -> Iterator[ServerInfo]:
    yield from _serve("redis", server_mode)


@pytest.fixture(scope="session")
def kafka_server(server_mode: str) -> Iterator[ServerInfo]:
    """A Kafka broker (KRaft); ``.endpoint`` (== ``.url``) is its bootstrap "host:port"."""
    yield from _serve("kafka", server_mode)


@pytest.fixture(scope="session")
def minio_server(server_mode: str) -> Iterator[ServerInfo]:
    """An S3-compatible server (MinIO); ``.url`` is its endpoint, ``.credentials`` the keys."""
    yield from _serve("minio", server_mode)


# --- a disk that loses what was never synced ----------------------------------------------


@pytest.fixture
def lossy_mount(tmp_path: Path) -> Iterator[LossyMount]:
    """tests/_lossyfs.py mounted at ``tmp_path / "mnt"`` (its state in ``tmp_path /
    "lossyfs"``): ``.path`` is the mount, ``.crash()`` the power cut (all that was not
    fsynced, file and directory, is lost; the mount serves again at the same path)."""
    reason = missing()
    if reason is not None:
        unavailable(f"the lossy FUSE file system cannot mount: {reason}")
    with LossyMount(tmp_path / "lossyfs", tmp_path / "mnt") as mount:
        yield mount
