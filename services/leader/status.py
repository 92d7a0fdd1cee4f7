"""The read-only status API every leader replica serves (active or standby).

``GET /status`` is the document behind ``shoal status --json``: ``leader``, ``members``
and ``partitions`` (each with ``partition``, ``owner``, ``generation``, ``lag``,
``oldest_unacked_age_s``, ``holder``), ``group`` (the consumer group's backlog totals,
see ``StatusReader.group``), ``top_projects`` (the projects with the most messages landed
recently, over every handler's report) and ``scaling`` (see ``StatusReader.scaling``);
also ``backends`` (``coordination`` and ``transport``: what the leader runs on), shown by
the dashboard and ``shoal status``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

import httpx
from fastapi import FastAPI
from fastapi.responses import JSONResponse, Response
from prometheus_client import CollectorRegistry

from core.backlog import backlog_alerts, group_backlog, merge_top_projects
from core.ports import AssignmentStore, Election, HoldStore, LoadReports, Membership
from core.scaling import member_loads
from services.common.clusters import Backlogs
from services.common.metrics import metrics_response
from services.leader.backlog import Backlog, BacklogReader, rounded_age
from services.leader.dashboard import mount_dashboard
from services.leader.leader_loop import LeaderLoop


class StatusReader:
    """Builds the status document; the backlog (lag and oldest unacked age) is read at most
    every ``lag_ttl`` seconds, by ``backlog`` when given (one reader shared with the
    alert and the gauges)."""

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
        backlog: BacklogReader | None = None,
        group: str = "default",
        mode: str = "exclusive",
        alert_age: float = 60.0,
        top_projects: int = 10,
    ) -> None:
        """``backends``: ``{"coordination": ..., "transport": ...}`` as configured;
        ``mode``: the group's consumption mode; ``alert_age``: the backlog alert's
        threshold (seconds); ``top_projects``: how many projects the ranking shows."""
        self._leader_loop = leader_loop
        self._election = election
        self._membership = membership
        self._reports = reports
        self._store = store
        self._holds = holds
        self._partitions = partitions
        self._backends = dict(backends)
        self._peers = tuple(p.rstrip("/") for p in peers)
        self._backlog = backlog or BacklogReader(transport, partitions, ttl=lag_ttl)
        self._group = group
        self._mode = mode
        self._alert_age = alert_age
        self._top_projects = top_projects

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
        backlog = await self._backlog.read()
        owners = assignment.owners if assignment else ((),) * self._partitions
        generation = assignment.generation if assignment else 0
        partitions = [
            {
                "partition": p,
                "owner": owners[p][0] if len(owners[p]) == 1 else (list(owners[p]) or None),
                "generation": generation,
                "lag": backlog.lags[p],
                "oldest_unacked_age_s": rounded_age(backlog.ages[p]),
                "holder": holds[p].member_id if p in holds else None,
            }
            for p in range(self._partitions)
        ]
        ranking = merge_top_projects(
            (stats.top_projects for stats in reports.values()), self._top_projects
        )
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
                {
                    "id": m,
                    "partitions": len(by_member.get(m, ())),
                    **{k: v for k, v in asdict(stats).items() if k != "top_projects"},
                }
                for m, stats in member_loads(members, reports).items()
            ],
            "partitions": partitions,
            "group": self.group(backlog),
            "top_projects": [{"project": p, "messages": n} for p, n in ranking],
            "rebalances": [asdict(r) for r in reversed(self._leader_loop.rebalances)],
            "scaling": await self.scaling(),
        }

    def group(self, backlog: Backlog) -> dict[str, Any]:
        """The consumer group's backlog: its ``name`` and consumption ``mode``,
        ``total_lag`` over the partitions whose lag was read (``unknown_lag``: how many
        could not be),
        ``max_oldest_unacked_age_s``, the ``alert_age_s`` threshold and the partitions
        ``alerting`` (oldest unacked age above it, by the read shown)."""
        totals = group_backlog(backlog.lags, backlog.ages)
        alerting = backlog_alerts(backlog.known_ages(), self._alert_age, frozenset()).alerting
        return {
            "name": self._group,
            "mode": self._mode,
            "total_lag": totals.total_lag,
            "unknown_lag": totals.unknown,
            "max_oldest_unacked_age_s": rounded_age(totals.max_oldest_age),
            "alert_age_s": self._alert_age,
            "alerting": sorted(alerting),
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
    """The status API; ``registry`` is what ``/metrics`` serves (the backlog gauges are
    on it when the reader's ``BacklogReader`` was given it)."""
    app = FastAPI(title="shoal leader status", docs_url=None, redoc_url=None)

    @app.get("/status")
    async def status(local: bool = False) -> Response:
        return JSONResponse(await reader.document(ask_peers=not local))

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/metrics")
    async def metrics() -> Response:
        return metrics_response(registry)

    mount_dashboard(app, reader)
    return app
