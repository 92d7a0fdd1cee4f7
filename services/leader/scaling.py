"""The autoscaling loop: every ``interval`` the active leader feeds ``core.scaling.decide``
with the handlers' stats and the broker's lag, acts on the scaler, and keeps the decision.

Only the active leader runs it: the leader loop starts ``ScalingLoop.run(leadership)`` in
the task group of its leadership, so losing leadership cancels it; and the loop checks,
with no I/O, that the leadership is not lost right before it acts. Every evaluation is
logged (``scaling decision``, with the reason) and kept in a bounded history for the
status API, holds included; ``shoal_scaling_decisions_total{decision,rule}`` counts them.

The cooldown starts at the tick of the action and lives in this process: a leader
elected after a failover has not seen the previous leader's last action, so it may act
at its first evaluation (see docs/architecture.md, "Scaling policy").
"""

from __future__ import annotations

import logging
import time
from collections import deque
from dataclasses import asdict, dataclass
from typing import Any

import anyio
from prometheus_client import CollectorRegistry, Counter, Gauge

from core.ports import Leadership, LoadReports, Membership, Scaler
from core.scaling import ScalingDecision, ScalingSnapshot, decide, member_loads
from services.common.clusters import Backlogs
from services.common.logs import fields
from services.leader.settings import AutoscalingSettings

__all__ = ["ScalingLoop", "ScalingRecord"]

log = logging.getLogger("shoal.leader.scaling")

_REPLICAS_TTL = 2.0  # the status API reads the scaler at most this often
_LAG_CONCURRENCY = 16
# Ticks are sums of floats: the tick where a cooldown ends may come out a hair early.
_TICK_SLACK = 1e-3


@dataclass(frozen=True)
class ScalingRecord:
    """One evaluation, as the status API shows it.

    ``decision`` is ``up``, ``down``, ``hold``, or ``error`` (an input could not be read,
    or the action failed: ``error`` says why). ``rule`` and ``reason`` come from the
    policy (``read-failed`` and ``not-leader`` are the loop's own). ``at`` is the wall
    clock; ``replicas_after`` is what the scaler was set to (the same as before unless
    the action succeeded).
    """

    at: float
    term: int
    decision: str
    rule: str
    reason: str
    replicas_before: int | None
    replicas_after: int | None
    target: int | None
    handlers: int
    total_lag: int | None
    error: str | None = None


class ScalingLoop:
    """One per leader process; ``run`` once per leadership term (it keeps the cooldown
    and the history across the terms of this process)."""

    def __init__(
        self,
        *,
        settings: AutoscalingSettings,
        partitions: int,
        scaler: Scaler | None,
        membership: Membership,
        reports: LoadReports,
        transport: Backlogs,
        registry: CollectorRegistry | None = None,
    ) -> None:
        self.settings = settings
        self.policy = settings.policy(partitions)
        self._partitions = partitions
        self._scaler = scaler
        self._membership = membership
        self._reports = reports
        self._transport = transport
        self.history: deque[ScalingRecord] = deque(maxlen=settings.history)
        self._term: int | None = None
        self._last_action_at: float | None = None  # tick of the last action (event loop clock)
        self._last_action_wall: float | None = None
        self._seen: tuple[float, int] | None = None  # (monotonic, replicas)
        registry = registry if registry is not None else CollectorRegistry()
        self._decisions = Counter(
            "shoal_scaling_decisions",
            "Autoscaling evaluations by decision (up, down, hold, error) and rule",
            ["decision", "rule"],
            registry=registry,
        )
        self._replicas_gauge = Gauge(
            "shoal_scaling_replicas",
            "Handler replicas as the scaler last reported",
            registry=registry,
        )

    @property
    def enabled(self) -> bool:
        return self.settings.active and self._scaler is not None

    @property
    def active(self) -> bool:
        """True while ``run`` runs (this replica leads and scales)."""
        return self._term is not None

    # -- the loop --------------------------------------------------------------------

    async def run(self, leadership: Leadership) -> None:
        """Evaluate now and every ``interval`` until cancelled (leadership lost)."""
        if not self.enabled:
            return
        interval = self.settings.interval
        self._term = leadership.term
        log.info(
            "autoscaling started",
            extra=fields(term=leadership.term, scaler=self.settings.scaler, interval=interval),
        )
        try:
            next_at = anyio.current_time()
            while True:
                try:
                    await self.evaluate(leadership, tick=next_at)
                except Exception:  # a bug here must not take rebalancing down with it
                    log.exception("scaling evaluation failed")
                now = anyio.current_time()
                while next_at <= now:  # a slow evaluation skips ticks, never bunches them
                    next_at += interval
                await anyio.sleep(next_at - now)
        finally:
            self._term = None
            log.info("autoscaling stopped", extra=fields(term=leadership.term))

    async def evaluate(self, leadership: Leadership, tick: float | None = None) -> ScalingRecord:
        """One evaluation: read, decide, act (if still the leader), record.

        ``tick`` is the evaluation's scheduled time (``anyio.current_time()``'s clock);
        the cooldown is measured between ticks, so a cooldown of k intervals ends exactly
        at the k-th tick after the action, whatever the scheduling delays.
        """
        assert self._scaler is not None
        s = self.settings
        at = time.time()
        now = anyio.current_time() if tick is None else tick
        try:
            with anyio.fail_after(s.timeout):
                replicas = await self._scaler.replicas()
                members = await self._membership.members()
                reports = await self._reports.reports()
        except Exception as exc:  # a failed read skips this evaluation, never the loop
            return self._keep(
                ScalingRecord(
                    at=at,
                    term=leadership.term,
                    decision="error",
                    rule="read-failed",
                    reason=f"hold: could not read replicas or load: {_describe(exc)}",
                    replicas_before=None,
                    replicas_after=None,
                    target=None,
                    handlers=0,
                    total_lag=None,
                    error=_describe(exc),
                )
            )
        self._seen_replicas(replicas)
        total_lag = await self._total_lag()
        decision = decide(
            ScalingSnapshot(member_loads(members, reports), total_lag),
            replicas,
            self._last_action_at,
            now + _TICK_SLACK,
            self.policy,
        )
        kind, rule, reason = _kind(decision), decision.rule, decision.reason
        after, error = replicas, None
        if decision.acts:
            if leadership.is_lost():
                kind, rule = "hold", "not-leader"
                reason = f"hold: leadership lost before acting ({decision.reason})"
            else:
                try:
                    with anyio.fail_after(s.timeout):
                        await self._scaler.scale_to(decision.target)
                except Exception as exc:  # recorded; the next evaluation decides again
                    kind, error = "error", _describe(exc)
                    reason = f"{decision.reason}; failed: {error}"
                else:
                    self._last_action_at, self._last_action_wall = now, at
                    after = decision.target
                    self._seen_replicas(after)
        return self._keep(
            ScalingRecord(
                at=at,
                term=leadership.term,
                decision=kind,
                rule=rule,
                reason=reason,
                replicas_before=replicas,
                replicas_after=after,
                target=decision.target,
                handlers=len(members),
                total_lag=total_lag,
                error=error,
            )
        )

    # -- the status API --------------------------------------------------------------

    async def current_replicas(self) -> int | None:
        """The scaler's count, read at most every 2 s (the last known one if it fails)."""
        if self._scaler is None:
            return None
        if self._seen is not None and time.monotonic() - self._seen[0] < _REPLICAS_TTL:
            return self._seen[1]
        try:
            with anyio.fail_after(_REPLICAS_TTL):
                self._seen_replicas(await self._scaler.replicas())
        except Exception as exc:  # the document shows the last known count instead
            log.debug("reading replicas failed", extra=fields(error=_describe(exc)))
        return None if self._seen is None else self._seen[1]

    async def status(self) -> dict[str, Any]:
        """The ``scaling`` section of ``GET /status``: newest decisions first."""
        s = self.settings
        cooldown_left = 0.0
        if self._last_action_at is not None:
            elapsed = anyio.current_time() - self._last_action_at
            cooldown_left = max(0.0, s.cooldown - elapsed)
        return {
            "enabled": self.enabled,
            "scaler": s.scaler,
            "active": self.active,
            "term": self._term,
            "replicas": await self.current_replicas() if self.enabled else None,
            "min_replicas": s.min_replicas,
            "max_replicas": s.max_replicas,
            "interval": s.interval,
            "cooldown": s.cooldown,
            "cooldown_left": round(cooldown_left, 3),
            "last_action_at": self._last_action_wall,
            "thresholds": {
                "cpu_max_usage": s.cpu_max_usage,
                "max_project_count": s.max_project_count,
                "low_load_threshold": s.low_load_threshold,
                "lag_per_handler": s.lag_per_handler,
            },
            "decisions": [asdict(r) for r in reversed(self.history)],
        }

    # -- helpers ---------------------------------------------------------------------

    def _seen_replicas(self, replicas: int) -> None:
        self._seen = (time.monotonic(), replicas)
        self._replicas_gauge.set(replicas)

    async def _total_lag(self) -> int | None:
        """The backlog summed over every partition; None if any partition's is unknown."""
        lags: list[int | None] = [None] * self._partitions
        limiter = anyio.CapacityLimiter(_LAG_CONCURRENCY)

        async def read(partition: int) -> None:
            async with limiter:
                try:
                    lags[partition] = await self._transport.backlog(partition)
                except Exception as exc:  # unknown lag: the lag rule says so and holds
                    log.debug(
                        "backlog read failed", extra=fields(partition=partition, error=str(exc))
                    )

        with anyio.move_on_after(self.settings.timeout):
            async with anyio.create_task_group() as tg:
                for partition in range(self._partitions):
                    tg.start_soon(read, partition)
        if any(lag is None for lag in lags):
            return None
        return sum(lag for lag in lags if lag is not None)

    def _keep(self, record: ScalingRecord) -> ScalingRecord:
        self.history.append(record)
        self._decisions.labels(decision=record.decision, rule=record.rule).inc()
        level = logging.WARNING if record.decision == "error" else logging.INFO
        log.log(
            level,
            "scaling decision",
            extra=fields(
                decision=record.decision,
                rule=record.rule,
                reason=record.reason,
                replicas_before=record.replicas_before,
                replicas_after=record.replicas_after,
                handlers=record.handlers,
                total_lag=record.total_lag,
                term=record.term,
            ),
        )
        return record


def _kind(decision: ScalingDecision) -> str:
    return "up" if decision.delta > 0 else "down" if decision.delta < 0 else "hold"


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
