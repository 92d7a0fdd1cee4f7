"""The soak: ``SHOAL_SOAK_MESSAGES`` messages (200,000 by default; ``tox -e soak`` sends
3,000,000) through one backend pair (``SHOAL_SOAK_BACKENDS``, default etcd+nats) as fast
as the gateway takes them, with a fault every few seconds (handlers killed and paused,
the leader killed), cycling until the load is sent. Nothing may be lost: zero lost in three
million bounds the loss rate under one per million at 95 % confidence (the rule of three);
every message id accepted in the run is in the table's committed version exactly once.
The Spark audit of the landing zone (drained, with the gateways' ledger) must agree.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest

from tests.e2e._analytics import run_audit
from tests.e2e._cluster import Cluster
from tests.e2e._load import LoadPlan
from tests.faults._faults import FaultRun
from tests.faults.test_faults import assert_exactly_once, print_run

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]

MESSAGES = int(os.environ.get("SHOAL_SOAK_MESSAGES", "200000"))
BACKENDS = os.environ.get("SHOAL_SOAK_BACKENDS", "etcd+nats")
SOAK_STREAM_CAP = 256 << 20
BETWEEN_FAULTS = 3.0  # seconds of undisturbed load after each fault recovered


async def test_soak_loses_nothing_under_a_fault_every_few_seconds(
    make_cluster: Callable[..., Cluster], tmp_path: Path
) -> None:
    coordination, transport = BACKENDS.split("+")
    # Four times the load of a fault run: room for what a failover leaves untrimmed.
    capped = {"SHOAL_NATS_MAX_BYTES": str(SOAK_STREAM_CAP)} if transport == "nats" else {}
    cluster = make_cluster("soak", coordination, transport, settings=capped)
    run = FaultRun(cluster, BACKENDS)
    # Unbounded load, stopped by finish() after the fault during which the count passed
    # MESSAGES: every fault, the last one too, recovers under load.
    plan = LoadPlan(messages=None, projects=1_000, batch=50, concurrency=16)
    faults = itertools.cycle(
        [
            run.handler_killed,
            run.handler_paused_briefly,
            run.leader_killed,
            run.handler_paused_past_lease,
        ]
    )
    # Three million messages take minutes at the gateway's rate; each fault far less.
    with anyio.fail_after(300 + MESSAGES / 1_000):
        async with anyio.create_task_group() as network:
            async with cluster, anyio.create_task_group() as tg:
                await run.start(tg, network, plan)
                load = run.load
                assert load is not None
                while load.summary.accepted_count < MESSAGES:
                    await next(faults)()
                    await anyio.sleep(BETWEEN_FAULTS)  # undisturbed load: the soak's cadence
                missing = await run.finish(within=300.0)
                summary = load.summary
                tg.cancel_scope.cancel()
            network.cancel_scope.cancel()  # the proxies outlive the processes using them
    print_run(run, BACKENDS)
    accepted = len(summary.accepted)
    print(
        f"SOAK {BACKENDS}: accepted={accepted} (at least {MESSAGES}) faults={len(run.rows)} "
        f"lost={len(missing)} duplicated={sum(r.duplicated for r in run.rows)} "
        f"landed_without_202={len(run.unanswered)} "
        f"{summary.line()}"
    )
    audit = run_audit(cluster)
    print(
        f"SOAK audit: accepted={audit['accepted']} landed={audit['landed']} "
        f"lost={audit['lost']} dead_lettered={audit['dead_lettered']} "
        f"duplicated={audit['duplicated']} nines={audit['nines_text']!r}"
    )
    problems = [f"{row.fault}: {p}" for row in run.rows for p in row.problems]
    assert accepted >= MESSAGES and not summary.failed_batches, summary.line()
    assert_exactly_once(run)
    assert not missing, f"{len(missing)} accepted messages never landed"
    assert not run.unanswered, f"{len(run.unanswered)} messages landed without a 202"
    assert audit["lost"] == 0 and audit["dead_lettered"] == 0
    assert audit["accepted"] == accepted
    assert audit["duplicated"] == 0
    assert not problems, "; ".join(problems)
