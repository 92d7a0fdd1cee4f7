"""The read-only status API every leader replica serves (active or standby).

``GET /status`` is the document behind ``shoal status --json``: ``leader``, ``members``
and ``partitions`` (each with ``partition``, ``owner``, ``generation``, ``lag``).
"""

from __future__ import annotations

import time
from dataclasses import asdict
from typing import Any

import anyio
from fastapi import FastAPI
from fastapi.responses import JSONResponse, Response
from prometheus_client import CollectorRegistry, Gauge

from core.ports import AssignmentStore, Election, Membership, Transport
from services.common.metrics import metrics_response
from services.leader.coordinator import Coordinator


class StatusReader:
    """Builds the status document; lag is read at most every ``lag_ttl`` seconds."""

    def __init__(
        self,
        *,
        coordinator: Coordinator,
        election: Election,
        membership: Membership,
        store: AssignmentStore,
        transport: Transport,
        partitions: int,
        lag_ttl: float = 2.0,
    ) -> None:
        self._coordinator = coordinator
        self._election = election
        self._membership = membership
        self._store = store
        self._transport = transport
        self._partitions = partitions
        self._lag_ttl = lag_ttl
        self._lag: list[int | None] = [None] * partitions
        self._lag_read_at = 0.0

    async def lags(self) -> list[int | None]:
        if time.monotonic() - self._lag_read_at < self._lag_ttl:
            return self._lag
        lags: list[int | None] = [None] * self._partitions

        async def read(partition: int) -> None:
            try:
                with anyio.fail_after(2.0):
                    lags[partition] = await self._transport.backlog(partition)
            except Exception:  # a lag we cannot read shows as null, not as an error page
                lags[partition] = None

        limiter = anyio.CapacityLimiter(16)

        async def bounded(partition: int) -> None:
            async with limiter:
                await read(partition)

        async with anyio.create_task_group() as tg:
            for partition in range(self._partitions):
                tg.start_soon(bounded, partition)
        self._lag, self._lag_read_at = lags, time.monotonic()
        return lags

    async def document(self) -> dict[str, Any]:
        leader = await self._election.leader()
        members = await self._membership.members()
        assignment = await self._store.current()
        holds = await self._store.holds()
        lags = await self.lags()
        owners = assignment.owners if assignment else ((),) * self._partitions
        generation = assignment.generation if assignment else 0
        partitions = [
            {
                "partition": p,
                "owner": owners[p][0] if len(owners[p]) == 1 else (list(owners[p]) or None),
                "generation": generation,
                "lag": lags[p],
                "holder": holds[p].member_id if p in holds else None,
            }
            for p in range(self._partitions)
        ]
        by_member = assignment.by_member() if assignment else {}
        return {
            "leader": None if leader is None else {"id": leader.leader_id, "term": leader.term},
            "served_by": {
                "id": self._coordinator.leader_id,
                "active": self._coordinator.leadership is not None,
            },
            "generation": generation,
            "members": [
                {"id": m, "partitions": len(by_member.get(m, ())), **asdict(stats)}
                for m, stats in sorted(members.items())
            ],
            "partitions": partitions,
            "rebalances": [asdict(r) for r in reversed(self._coordinator.rebalances)],
        }


def create_status_app(reader: StatusReader, registry: CollectorRegistry) -> FastAPI:
    app = FastAPI(title="shoal leader status", docs_url=None, redoc_url=None)
    lag_gauge = Gauge(
        "shoal_partition_lag", "Backlog per partition", ["partition"], registry=registry
    )

    @app.get("/status")
    async def status() -> Response:
        document = await reader.document()
        for entry in document["partitions"]:
            if entry["lag"] is not None:
                lag_gauge.labels(partition=str(entry["partition"])).set(entry["lag"])
        return JSONResponse(document)

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/metrics")
    async def metrics() -> Response:
        return metrics_response(registry)

    return app
