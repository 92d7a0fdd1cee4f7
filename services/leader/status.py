"""The read-only status API every leader replica serves (active or standby).

``GET /status`` is the document behind ``shoal status --json``: ``leader``, ``members``
and ``partitions`` (each with ``partition``, ``owner``, ``generation``, ``lag``,
``oldest_unacked_age_s``, ``holder``), ``group`` (the consumer group's backlog totals,
see ``StatusReader.group``), ``top_projects`` (the projects with the most messages landed
recently, over every handler's report), ``scaling`` (see ``StatusReader.scaling``) and
``table`` (the landing table's size and upkeep: ``TableKeeper.status``, or
``{"enabled": false, "active": false}`` from a leader that keeps no table up); also
``backends`` (``coordination`` and ``transport``: what the leader runs on), shown by the
dashboard and ``shoal status``; and ``age_s``, how old the document is.

A request never reads the coordination store or the broker: ``LiveStatus`` keeps the
document up to date in the background (every ``interval``, and at once when this replica
wins or loses leadership, sees the members change or publishes a generation), reading
the backlog in a loop of its own (one read per partition: the slow part on a busy
broker), and the endpoint serves the last document it read. So the API answers in
milliseconds however slow the store or the broker is: while a read is under way the last
document is served (``age_s`` tells how old), for ``max_age`` seconds at most; once a read
failed (a store that does not answer), 503 saying why until one succeeds.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import anyio
from anyio.abc import TaskStatus
from fastapi import FastAPI
from fastapi.responses import JSONResponse, Response

from core.backlog import backlog_alerts, group_backlog, merge_top_projects
from core.ports import AssignmentStore, Election, HoldStore, LoadReports, Membership
from core.scaling import member_loads
from services.common.clusters import Backlogs
from services.common.logs import fields
from services.common.upkeep import no_table_status
from services.leader.backlog import Backlog, BacklogReader, rounded_age
from services.leader.dashboard import mount_dashboard
from services.leader.leader_loop import LeaderLoop

__all__ = ["LiveStatus", "StatusNotReadyError", "StatusReader", "create_status_app"]

log = logging.getLogger("shoal.leader.status")


class StatusReader:
    """Builds the status document from the stores (``LiveStatus`` calls it in the
    background; the API never does); the backlog (lag and oldest unacked age) is read at
    most every ``lag_ttl`` seconds, by ``backlog`` when given (one reader shared with the
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

    @property
    def leader_loop(self) -> LeaderLoop:
        return self._leader_loop

    @property
    def backlog(self) -> BacklogReader:
        return self._backlog

    async def document(
        self, *, ask_peers: bool = True, backlog: Backlog | None = None
    ) -> dict[str, Any]:
        """The status document, read now (``backlog``: that read of the backlog instead of
        reading it). ``ask_peers``: see ``with_active_history``."""
        document = await self._local_document(backlog)
        return await self.with_active_history(document) if ask_peers else document

    async def with_active_history(self, document: dict[str, Any]) -> dict[str, Any]:
        """``document`` as a replica serves it. A standby replica keeps no rebalance or
        scaling history, nor the table's upkeep, of its own (the active leader does them):
        it copies those sections from whichever of its ``peers`` is active, so every
        replica's dashboard tells the whole story."""
        if document["served_by"]["active"] or not self._peers:
            return document
        active = await self._active_peer_document()
        if active is None:
            return document
        return {
            **document,
            "rebalances": active["rebalances"],
            "scaling": active["scaling"],
            "table": active.get("table", document["table"]),  # a peer from before it had one
            "history_from": active["served_by"]["id"],
        }

    async def _active_peer_document(self) -> dict[str, Any] | None:
        # Here, not at the top: httpx (with click, rich and pygments where installed) is
        # 5 MB a leader without peers (SHOAL_LEADER_PEERS) does without.
        import httpx  # noqa: PLC0415 (only with peers)

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

    async def _local_document(self, backlog: Backlog | None = None) -> dict[str, Any]:
        leader = await self._election.leader()
        members = await self._membership.members()
        reports = await self._reports.reports()
        assignment = await self._store.current()
        holds = await self._holds.holds()
        if backlog is None:
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
            "table": self.table(),
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

    def table(self) -> dict[str, Any]:
        """The landing table: size, log and upkeep (``TableKeeper.status``) as the leader
        loop's keeper last saw it; ``active`` tells whether this replica keeps it up now."""
        keeper = self._leader_loop.upkeep
        return no_table_status() if keeper is None else keeper.status()

    async def scaling(self) -> dict[str, Any]:
        """Autoscaling: scaler, current replicas, bounds, and the last decisions (newest
        first, with time, decision, rule, reason, replicas before/after). A standby shows
        the decisions of its own past terms; ``active`` tells whether it scales now."""
        loop = self._leader_loop.scaling
        if loop is None:
            return {"enabled": False, "scaler": "none", "active": False, "decisions": []}
        return await loop.status()


class StatusNotReadyError(RuntimeError):
    """No document to serve: none was read yet, or the last one is older than allowed."""


@dataclass(frozen=True, slots=True)
class _Snapshot:
    local: dict[str, Any]  # this replica's own view (``GET /status?local=true``)
    served: dict[str, Any]  # with the active peer's history when this replica stands by
    read_at: float  # time.monotonic() when the read started


class LiveStatus:
    """The status document every request is served: read by ``run`` in the background,
    so a request does no I/O and waits for nothing.

    ``run`` reads the document every ``interval`` seconds, and about at once (after
    ``settle``: a burst of changes is one read) when the leader loop reports a change:
    leadership won or lost, the members changed, a generation published. The backlog is
    read by a loop of its own every ``backlog_interval`` (default: the reader's TTL), and
    a document takes the last read: one per partition, it is what takes long on a busy
    broker, and the leader, the members and the owners are not held back by it. Each
    read is bounded by ``timeout``. While a read is under way the last document is
    served, up to ``max_age`` seconds after its own read began; after a read that failed,
    none is until one succeeds (``StatusNotReadyError``, a 503 to the API): a document
    the stores could not confirm is not shown as the current state.
    """

    def __init__(
        self,
        reader: StatusReader,
        *,
        interval: float = 1.0,
        backlog_interval: float | None = None,
        settle: float = 0.05,
        timeout: float = 10.0,
        max_age: float = 15.0,
        first_backlog_wait: float = 3.0,
    ) -> None:
        if interval <= 0 or timeout <= 0 or max_age <= 0 or settle < 0:
            raise ValueError("interval, timeout and max_age must be > 0, settle >= 0")
        self._reader = reader
        self._interval = interval
        self._backlog_interval = backlog_interval or reader.backlog.ttl
        self._settle = settle
        self._timeout = timeout
        self._max_age = max_age
        self._first_backlog_wait = first_backlog_wait
        self._snapshot: _Snapshot | None = None
        self._error = ""  # why the last read failed ("" when it did not)
        self._wake = anyio.Event()
        self._backlog_read = anyio.Event()
        reader.leader_loop.on_change(self.refresh_soon)

    def refresh_soon(self) -> None:
        """Read the document again now (after ``settle``) rather than at the next period."""
        self._wake.set()

    def served(self, *, local: bool = False) -> dict[str, Any]:
        """The last document read (``local``: without the active peer's history) with its
        ``age_s``. Raises ``StatusNotReadyError`` when the last read failed, when none
        was read yet, or when it is older than ``max_age`` (a read hangs)."""
        snapshot, error = self._snapshot, self._error
        if error:
            raise StatusNotReadyError(f"the status document cannot be read: {error}")
        if snapshot is None:
            raise StatusNotReadyError("the status document has not been read yet")
        age = time.monotonic() - snapshot.read_at
        if age > self._max_age:
            raise StatusNotReadyError(
                f"the status document was last read {age:.0f} s ago (a read is under way)"
            )
        document = snapshot.local if local else snapshot.served
        return {**document, "age_s": round(age, 3)}

    async def document(self, *, local: bool = False) -> dict[str, Any]:
        """``served`` as a ``DocumentSource`` (the dashboard's stream reads it)."""
        return self.served(local=local)

    async def run(
        self,
        stop: anyio.Event | None = None,
        *,
        task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Keep the document up to date until ``stop`` is set (or cancelled); started once
        the first read has ended (served or failed)."""
        async with anyio.create_task_group() as tg:
            if stop is not None:

                async def on_stop() -> None:
                    await stop.wait()
                    tg.cancel_scope.cancel()

                tg.start_soon(on_stop)
            tg.start_soon(self._keep_backlog)
            await self._refresh()
            task_status.started()
            while True:
                wake = self._wake
                with anyio.move_on_after(self._interval):
                    await wake.wait()
                    await anyio.sleep(self._settle)
                self._wake = anyio.Event()  # changes from here on wake the next round
                await self._refresh()

    async def _refresh(self) -> None:
        started = time.monotonic()
        try:
            with anyio.fail_after(self._timeout):
                backlog = await self._backlog()
                local = await self._reader.document(ask_peers=False, backlog=backlog)
                served = await self._reader.with_active_history(local)
        except Exception as exc:  # served as a 503 saying why, until a read succeeds
            error = f"{type(exc).__name__}: {exc}" if str(exc) else repr(exc)
            if not self._error:
                log.warning("status document not read", extra=fields(error=error))
            self._error = error
            return
        self._snapshot = _Snapshot(local, served, started)
        if self._error:
            log.info("status document read again", extra=fields(after_error=self._error))
            self._error = ""

    async def _backlog(self) -> Backlog:
        """The last backlog read; at start-up, the first one (for ``first_backlog_wait``
        at most: then every partition shows as unknown until it comes)."""
        if not self._backlog_read.is_set():
            with anyio.move_on_after(self._first_backlog_wait):
                await self._backlog_read.wait()
        return self._reader.backlog.last

    async def _keep_backlog(self) -> None:
        backlog = self._reader.backlog
        while True:
            try:
                await backlog.read()  # at most once per TTL: shared with the alert
            except Exception as exc:  # unreadable partitions are unknown, not errors
                log.warning("backlog not read", extra=fields(error=repr(exc)))
            else:
                if not self._backlog_read.is_set():
                    self._backlog_read.set()
                    self.refresh_soon()
            await anyio.sleep(self._backlog_interval)


def create_status_app(live: LiveStatus) -> FastAPI:
    """The status API, serving what ``live`` read (``live.run`` keeps it up to date). The
    leader's metrics are not here: ``services.common.metrics.metrics_app`` serves them on
    a port of their own."""
    app = FastAPI(title="shoal leader status", docs_url=None, redoc_url=None)

    @app.get("/status")
    async def status(local: bool = False) -> Response:
        try:
            return JSONResponse(live.served(local=local))
        except StatusNotReadyError as exc:
            return JSONResponse({"error": str(exc)}, status_code=503, headers={"Retry-After": "1"})

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    mount_dashboard(app, live)
    return app
