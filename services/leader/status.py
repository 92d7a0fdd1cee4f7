"""The read-only status API every leader replica serves (active or standby).

``GET /status`` is the document behind ``shoal status --json``: ``leader``, ``members``
and ``partitions`` (each with ``partition``, ``owner``, ``generation``, ``lag``), and
``scaling`` (see ``StatusReader.scaling``); also ``backends`` (``coordination`` and
``transport``: what the leader runs on), shown by the dashboard and ``shoal status``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

import anyio
import httpx
from fastapi import FastAPI
from fastapi.responses import JSONResponse, Response
from prometheus_client import CollectorRegistry, Gauge

from core.ports import AssignmentStore, Election, HoldStore, LoadReports, Membership
from core.scaling import member_loads
from services.common.clusters import Backlogs
from services.common.metrics import metrics_response
from services.leader.dashboard import mount_dashboard
from services.leader.leader_loop import LeaderLoop


class StatusReader:
    """Builds the status document; lag is read at most every ``lag_ttl`` seconds."""

    def __init__(
        self,
        *,
        leader_loop: LeaderLoop,
        election: Election,
        membership: Membership,
        reports: LoadReports,
        store: AssignmentStore,
        holds: HoldStore,
        transport: Backlogs,
        partitions: int,
        backends: Mapping[str, str],
        lag_ttl: float = 2.0,
        peers: Sequence[str] = (),
    ) -> None:
        """``backends``: ``{"coordination": ..., "transport": ...}`` as configured."""
        self._leader_loop = leader_loop
        self._election = election
        self._membership = membership
        self._reports = reports
        self._store = store
        self._holds = holds
        self._transport = transport
        self._partitions = partitions
        self._backends = dict(backends)
        self._lag_ttl = lag_ttl
        self._peers = tuple(p.rstrip("/") for p in peers)
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

    async def document(self, *, ask_peers: bool = True) -> dict[str, Any]:
        """The status document. A standby replica keeps no rebalance or scaling history of
        its own (the active leader makes them): it copies those sections from whichever
        of its ``peers`` is active, so every replica's dashboard tells the whole story."""
        document = await self._local_document()
        if ask_peers and not document["served_by"]["active"] and self._peers:
            active = await self._active_peer_document()
            if active is not None:
                document["rebalances"] = active["rebalances"]
                document["scaling"] = active["scaling"]
                document["history_from"] = active["served_by"]["id"]
        return document

    async def _active_peer_document(self) -> dict[str, Any] | None:
        async with httpx.AsyncClient(timeout=1.0, trust_env=False) as client:
            for peer in self._peers:
                try:
                    response = await client.get(f"{peer}/status", params={"local": "true"})
                    peer_doc: dict[str, Any] = response.json()
                except (httpx.HTTPError, ValueError):
                    continue
                if peer_doc.get("served_by", {}).get("active"):
                    return peer_doc
        return None

    async def _local_document(self) -> dict[str, Any]:
        leader = await self._election.leader()
        members = await self._membership.members()
        reports = await self._reports.reports()
        assignment = await self._store.current()
        holds = await self._holds.holds()
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
                "id": self._leader_loop.leader_id,
                "active": self._leader_loop.leadership is not None,
            },
            "backends": self._backends,
            "generation": generation,
            "members": [
                {"id": m, "partitions": len(by_member.get(m, ())), **asdict(stats)}
                for m, stats in member_loads(members, reports).items()
            ],
            "partitions": partitions,
            "rebalances": [asdict(r) for r in reversed(self._leader_loop.rebalances)],
            "scaling": await self.scaling(),
        }

    async def scaling(self) -> dict[str, Any]:
        """Autoscaling: scaler, current replicas, bounds, and the last decisions (newest
        first, with time, decision, rule, reason, replicas before/after). A standby shows
        the decisions of its own past terms; ``active`` tells whether it scales now."""
        loop = self._leader_loop.scaling
        if loop is None:
            return {"enabled": False, "scaler": "none", "active": False, "decisions": []}
        return await loop.status()


def create_status_app(reader: StatusReader, registry: CollectorRegistry) -> FastAPI:
    app = FastAPI(title="shoal leader status", docs_url=None, redoc_url=None)
    lag_gauge = Gauge(
        "shoal_partition_lag", "Backlog per partition", ["partition"], registry=registry
    )

    @app.get("/status")
    async def status(local: bool = False) -> Response:
        document = await reader.document(ask_peers=not local)
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

    mount_dashboard(app, reader)
    return app
