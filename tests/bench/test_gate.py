"""The CI gate of the pipeline benchmark: short runs (50,000 messages) in which shoal end to
end must keep its measured speed against the plain client pipeline on the same server, in
the same run: NATS with the broker fsyncing every write (durable) and with its default
sync (relaxed), and Kafka durable. Each floor is 0.8 x the ratio measured when issue 32's
packs landed (docs/benchmarks.md), so a change that gives the gain back cannot land; the full
table (Kafka relaxed, files, latency, rebalance, memory) is ``tox -e bench``."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from infra.local.servers import start_etcd
from tests.bench.pipeline import cpu_per_100k, raw_rate, servers_for, shoal_throughput

MESSAGES = 50_000
# shoal / plain msgs/s: 0.8 x the lowest of this gate's runs with packs (docs/benchmarks.md:
# NATS durable 2.26-2.53 x, relaxed 0.45-0.62 x, Kafka durable 0.29-0.31 x).
FLOORS = {
    ("nats", "durable"): 1.8,
    ("nats", "relaxed"): 0.36,
    ("kafka", "durable"): 0.23,
}


@pytest.mark.anyio
@pytest.mark.parametrize(("transport", "mode"), list(FLOORS))
async def test_end_to_end_keeps_its_ratio_to_the_plain_pipeline(
    tmp_path: Path, transport: str, mode: str
) -> None:
    etcd = start_etcd()
    try:
        with servers_for(mode, [transport], etcd) as servers:
            raw, raw_cpu = await anyio.to_thread.run_sync(raw_rate, transport, servers, MESSAGES)
            shoal = await shoal_throughput(transport, servers, MESSAGES, tmp_path)
    finally:
        etcd.stop()
    ratio = shoal.rate / raw
    floor = FLOORS[transport, mode]
    print(
        f"\nBENCH gate: {transport} {mode}, {MESSAGES} messages: shoal {shoal.rate:,.0f} "
        f"msgs/s, plain {raw:,.0f} msgs/s, {ratio:.2f} x (floor {floor}); the gateway "
        f"accepted {shoal.accepted_rate:,.0f} msgs/s; CPU s per 100k messages: shoal "
        f"{cpu_per_100k(shoal.cpu, MESSAGES):.1f}, plain {cpu_per_100k(raw_cpu, MESSAGES):.1f}; "
        f"{len(shoal.zone.files)} files, {shoal.zone.duplicates} duplicate rows"
    )
    assert shoal.zone.duplicates == 0
    assert ratio >= floor, (
        f"{transport} {mode}: shoal end to end is {ratio:.2f} x the plain pipeline (< {floor})"
    )
