"""The fault matrix: every backend pair under steady load takes a series of faults (a
handler killed mid-batch, a handler paused past its lease while it writes a file and
resumed, a handler paused briefly, the leader killed, the leader paused past its lease and
resumed, a poison message, a minute of handler churn, on etcd and Redis a handler and the
leader cut off from the store by a blackholing proxy, on Redis a handler whose releases
the store refuses for a while, then the store and the broker killed and restarted).
Each fault is a row: lost, duplicated and seconds to recover, printed as ``FAULT`` lines.
Lost = 0 is asserted for every row, and so are the bounds (failover within the lease TTL +
2 s, a dead handler's partitions landing again within the TTL + 20 s, no zombie write and
no half-written file left, no rebalance for a brief pause, no publish under a stale term,
balanced within one after churn, partitions whose release failed landing again within 25 s
of the store accepting releases).

Run with ``tox -e faults`` (or ``pytest tests/faults -s``).
"""

from __future__ import annotations

from collections.abc import Callable

import anyio
import pytest

from tests.e2e._cluster import Cluster
from tests.faults._faults import FaultRun, Row

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]

PAIRS = [
    ("etcd", "nats"),
    ("redis", "nats"),
    ("kafka", "kafka"),
    ("etcd", "kafka"),
    ("redis", "kafka"),
    ("nats", "nats"),
]


def print_rows(rows: list[Row]) -> None:
    print()
    for row in rows:
        print(row.line())


@pytest.mark.parametrize(
    ("coordination", "transport"), [pytest.param(c, t, id=f"{c}+{t}") for c, t in PAIRS]
)
async def test_every_fault_loses_nothing_and_recovers_within_its_bound(
    make_cluster: Callable[..., Cluster],
    request: pytest.FixtureRequest,
    coordination: str,
    transport: str,
) -> None:
    cluster = make_cluster("faults", coordination, transport)
    servers = {
        kind: request.getfixturevalue(f"{kind}_server") for kind in {coordination, transport}
    }
    run = FaultRun(cluster, f"{coordination}+{transport}", servers)
    with anyio.fail_after(900):
        async with anyio.create_task_group() as network:
            async with cluster, anyio.create_task_group() as tg:
                await run.start(tg, network)
                await run.handler_killed()
                await run.handler_paused_past_lease()
                await run.handler_paused_briefly()
                await run.leader_killed()
                await run.leader_paused_past_lease()
                await run.poison_message()
                await run.handler_churn()
                if run.proxies:  # etcd and Redis
                    await run.handler_cut_off()
                    await run.leader_cut_off()
                if coordination == "redis":  # the store can refuse one user's hold writes
                    await run.release_refused()
                if coordination == transport:
                    await run.server_restarted(transport, "store and broker")
                else:
                    await run.server_restarted(coordination, "store")
                    await run.server_restarted(transport, "broker")
                missing = await run.finish()
                tg.cancel_scope.cancel()
            network.cancel_scope.cancel()  # the proxies outlive the processes using them
    print_rows(run.rows)
    problems = [f"{row.fault}: {p}" for row in run.rows for p in row.problems]
    assert not missing, f"{len(missing)} accepted messages never landed"
    assert all(row.lost == 0 for row in run.rows)
    assert all(row.duplicated == 0 for row in run.rows), "exactly-once landing broke"
    assert not problems, "; ".join(problems)
