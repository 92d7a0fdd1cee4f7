"""The CI gate of the pipeline benchmark: short runs (50,000 messages) in which shoal end to
end must keep its measured cost per message against the plain client pipeline on the same
server, in the same run: NATS with the broker fsyncing every write (durable) and with its
default sync (relaxed), and Kafka durable. The figure is the plain pipeline's CPU seconds
per message over shoal's (every process and server counted, docs/benchmarks.md): messages
per second move with the machine's disk and cores (NATS durable measured 2.26-2.53 x the
plain pipeline's rate on one machine and 1.39 x on the CI machine, with the same commit),
what a message costs much less so. Each floor sits 0.8 x below what issue 32's changes
measured (``FLOORS``), so a change that gives the gain back cannot land; the full table
(Kafka relaxed, files, latency, rebalance, memory) is ``tox -e bench``.

shoal runs on the default pair, as ``shoal up`` starts it: NATS KV coordination
(``SHOAL_COORDINATION=nats``, the default whatever the transport) on the NATS rows' own
nats-server, and on a nats-server started beside the broker for the Kafka row (NATS KV +
Kafka: ``shoal up --transport kafka``). Every server shoal runs on counts in its CPU, the
store's as much as the broker's."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from tests.bench.pipeline import (
    Servers,
    cpu_per_100k,
    raw_rate,
    servers_for,
    shoal_throughput,
    warm_up,
)

MESSAGES = 50_000
MEASUREMENTS = 2  # at most: the gate judges the better of them
# plain CPU s / shoal CPU s per message. With packs: NATS durable 1.23-1.45 x over five
# runs on two machines, relaxed 0.80-1.34 x, Kafka durable 0.21-0.28 x. With standing pulls
# and batched backlog reads, four runs (the gate at 9f78264 here, at 7bef039 in CI and at
# b8dd24c in a fresh clone's bin/test here; the whole bench's 100,000 messages at cb0a0e2):
# NATS durable 1.73, 1.99, 1.42, 1.94 x; relaxed 1.25, 0.97, 1.25, 0.90 x; Kafka durable
# 0.32, 0.31, 0.24, 0.42 x. Each floor is 0.8 x the lowest. The runs of one commit spread
# wider than 20 % (Kafka: shoal's CPU per message 20.5 in one, 36.5 in another), so the
# Kafka floor sits below the start's own ratio (0.26 x in the bench at cb0a0e2): it stops a
# collapse, not a slow erosion; the bench's --baseline measures that. A fresh clone's
# bin/test at 8e51235 measured Kafka durable at 0.19 x (shoal 38.6, plain 7.2 CPU s per
# 100k; 0.29 x half an hour before at 4ea2704): hence the better of two runs. Those runs
# coordinated on etcd; the first on NATS KV (the default pair, 2026-12-06) measured
# 1.78, 1.37 and 0.31 x, within or above them: the floors stand.
FLOORS = {
    ("nats", "durable"): 1.14,
    ("nats", "relaxed"): 0.72,
    ("kafka", "durable"): 0.19,
}


@pytest.mark.anyio
@pytest.mark.parametrize(("transport", "mode"), list(FLOORS))
async def test_shoal_keeps_its_cost_per_message_against_the_plain_pipeline(
    tmp_path: Path, transport: str, mode: str
) -> None:
    floor = FLOORS[transport, mode]
    ratios: list[float] = []
    with servers_for(mode, [transport]) as servers:  # no etcd: NATS KV coordination
        assert servers.coordination == "nats"
        await warm_up(transport, servers, tmp_path / "warm-up")
        # A busy machine adds CPU to whichever pipeline it hits (Kafka's ratio spread
        # 0.19-0.42 x over one commit's runs), so a run below the floor is measured once
        # more and the better figure judged: a real loss shows in both.
        for run in range(MEASUREMENTS):
            ratio = await _measure(transport, mode, servers, tmp_path / f"run-{run}", floor)
            ratios.append(ratio)
            if ratio >= floor:
                break
    assert max(ratios) >= floor, (
        f"{transport} {mode}: shoal moves {max(ratios):.2f} x the plain pipeline's messages "
        f"per CPU-second at best of {len(ratios)} runs ({', '.join(f'{r:.2f}' for r in ratios)}"
        f"; floor {floor})"
    )


async def _measure(transport: str, mode: str, servers: Servers, where: Path, floor: float) -> float:
    """One run of the plain pipeline and of shoal: plain CPU per message over shoal's."""
    raw, raw_cpu = await anyio.to_thread.run_sync(raw_rate, transport, servers, MESSAGES)
    shoal = await shoal_throughput(transport, servers, MESSAGES, where)
    shoal_cost = cpu_per_100k(shoal.cpu, MESSAGES)
    plain_cost = cpu_per_100k(raw_cpu, MESSAGES)
    ratio = plain_cost / shoal_cost
    print(
        f"\nBENCH gate: {servers.coordination}+{transport} {mode}, {MESSAGES} messages: "
        "CPU s per 100k messages: "
        f"shoal {shoal_cost:.1f}, plain {plain_cost:.1f}: shoal's messages per CPU-second "
        f"{ratio:.2f} x the plain pipeline's (floor {floor}); shoal {shoal.rate:,.0f} msgs/s "
        f"(the gateway accepted {shoal.accepted_rate:,.0f}), plain {raw:,.0f} msgs/s; "
        f"{len(shoal.zone.files)} files, {shoal.zone.duplicates} duplicate rows; shoal's "
        "CPU s per 100k by process: "
        + ", ".join(
            f"{name} {cpu_per_100k(cpu, MESSAGES):.1f}"
            for name, cpu in sorted(shoal.cpu_by.items())
        )
    )
    assert shoal.zone.duplicates == 0
    return ratio
