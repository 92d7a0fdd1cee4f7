"""The fault matrix: a backend pair under steady load takes a series of faults (a handler
killed mid-batch, a handler paused past its lease while it writes a file and resumed, a
handler paused briefly, the leader killed, the leader paused past its lease and resumed, a
poison message, a minute of handler churn, on etcd and Redis a handler and the leader cut
off from the store by a blackholing proxy, on Redis a handler whose releases the store
refuses for a while, then the store and the broker killed and restarted; on a 3-node NATS
cluster at three replicas, the data stream's leader, a follower and the coordination
bucket's leader mid-rebalance SIGKILLed, each restarted). Each fault is a
row: lost, duplicated and seconds to recover, printed as ``FAULT`` lines; then the whole
run (``RUN``): every message id accepted in it, whatever row it fell in and the warm-up
before the first fault included, is in the table's committed version exactly once. Lost = 0 is
asserted for every row, and so are the bounds, each derived from the settings it depends
on plus a stated margin (``tests/faults/_faults.py``): failover, takeover of a lost
holder's partitions, consuming again after a pause, no zombie write and no half-written
file left, no rebalance for a brief pause, no publish under a stale term, balanced within
one after churn.

``tox -e faults`` runs every row on every pair; ``bin/test`` the tier (``--fault-rows
tier``); one row alone: ``tox -e faults -- --fault-rows etcd+nats:leader_killed``
(``tests/faults/_matrix.py``).
"""

from __future__ import annotations

from collections.abc import Callable

import anyio
import pytest

from infra.local.servers import NatsCluster
from tests.e2e._cluster import Cluster
from tests.faults._faults import (
    FAULT_STREAM_CAP,
    MIN_ROW_ACCEPTED,
    PUBLISH_DEADLINE,
    FaultRun,
    cluster_settings,
)
from tests.faults._matrix import CLUSTER_PAIR

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]

SECONDS_PER_ROW = 180.0  # a generous ceiling: each row bounds its own waits far below it


def print_run(run: FaultRun, label: str) -> None:
    """The run's table: a line per row, then the whole run against the table."""
    print()
    for row in run.rows:
        print(row.line())
    if run.tally is not None:
        print(f"RUN   {label:<12} {run.tally.line()}")


def assert_exactly_once(run: FaultRun) -> None:
    """Every message id accepted in the run landed exactly once, none landed twice."""
    tally = run.tally
    assert tally is not None, "the run was not finished"
    assert tally.exactly_once, (
        f"the whole run against the table: {tally.line()}; for example {list(tally.examples)}"
    )


async def test_every_fault_loses_nothing_and_recovers_within_its_bound(
    make_cluster: Callable[..., Cluster],
    request: pytest.FixtureRequest,
    pair: str,
    fault_rows: list[str],
) -> None:
    coordination, transport = pair.split("+")
    settings = {"SHOAL_GATEWAY_PUBLISH_DEADLINE": str(PUBLISH_DEADLINE)}
    nodes: NatsCluster | None = None
    if pair == CLUSTER_PAIR:  # the default pair on the session's 3-node cluster
        nodes = request.getfixturevalue("nats_cluster")
        settings |= cluster_settings(nodes)
        coordination = transport = "nats"
    if transport == "nats":
        settings["SHOAL_NATS_MAX_BYTES"] = str(FAULT_STREAM_CAP)
    cluster = make_cluster("faults", coordination, transport, settings=settings)
    servers = (
        {}
        if nodes is not None
        else {kind: request.getfixturevalue(f"{kind}_server") for kind in {coordination, transport}}
    )
    run = FaultRun(cluster, pair, servers, nodes)
    with anyio.fail_after(300 + SECONDS_PER_ROW * len(fault_rows)):
        async with anyio.create_task_group() as network:
            async with cluster, anyio.create_task_group() as tg:
                await run.start(tg, network)
                for fault in fault_rows:
                    await run.inject(fault)
                missing = await run.finish()
                tg.cancel_scope.cancel()
            network.cancel_scope.cancel()  # the proxies outlive the processes using them
    print_run(run, pair)
    summary = run.load_summary()
    print(f"FAULT {pair} load: {summary.line()} landed without a 202: {len(run.unanswered)}")
    problems = [f"{row.fault}: {p}" for row in run.rows for p in row.problems]
    problems += [
        f"{row.fault}: only {row.last - row.first} messages accepted while it lasted "
        f"(at least {MIN_ROW_ACCEPTED}: the row must run under load)"
        for row in run.rows
        if row.last - row.first < MIN_ROW_ACCEPTED
    ]
    assert summary.failed_batches == 0, f"the simulator gave up batches: {summary.last_error}"
    assert_exactly_once(run)
    assert not missing, f"{len(missing)} accepted messages never landed"
    assert not run.unanswered, f"{len(run.unanswered)} messages landed without a 202"
    assert all(row.lost == 0 for row in run.rows)
    assert all(row.duplicated == 0 for row in run.rows), "exactly-once landing broke"
    assert not problems, "; ".join(problems)
