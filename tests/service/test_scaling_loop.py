"""The autoscaling loop in the leader, in one process over the in-memory adapters.

Decisions (holds included) land in the status document with their reasons; only the
active leader evaluates and acts, and a leader that loses leadership stops at once;
cooldown and [min, max] hold; the lag rule reads the transport's backlog; failures are
recorded, not fatal. Load reports come from real ``InMemoryMembership`` leases (through
``InMemoryLoadReports``) and the pool is an ``InMemoryScaler`` (the same contract as the
real scalers: tests/contract).
"""

from __future__ import annotations

import itertools
import json
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
import pytest
from anyio.abc import TaskGroup, TaskStatus
from prometheus_client import CollectorRegistry

from adapters.kubernetes import KubernetesScaler
from adapters.local import LocalProcessScaler
from adapters.memory import (
    InMemoryAssignmentStore,
    InMemoryCoordination,
    InMemoryElection,
    InMemoryHoldStore,
    InMemoryLoadReports,
    InMemoryMembership,
    InMemoryMembershipLease,
    InMemoryTransport,
)
from adapters.memory._scaler import InMemoryScaler
from core.assignment import strategy_named
from core.ingest import stamp
from core.model import MemberStats
from core.ports import Scaler
from services.common.settings import LeaderSettings
from services.leader.leader_loop import LeaderLoop
from services.leader.main import LeaderContainer, configure_scaling
from services.leader.scaling import ScalingLoop, ScalingRecord
from services.leader.settings import AutoscalingSettings
from services.leader.status import StatusReader

pytestmark = pytest.mark.anyio

PARTITIONS = 8
LIMIT = 10.0


def fast(**overrides: Any) -> AutoscalingSettings:
    """Evaluate every 20 ms, 250 ms cooldown, pool in [1, 3], +1 above 10 projects per
    handler, -1 below 2."""
    values: dict[str, Any] = {
        "scaler": "local",
        "interval": 0.02,
        "cooldown": 0.25,
        "min_replicas": 1,
        "max_replicas": 3,
        "max_project_count": 10,
        "low_load_threshold": 2.0,
        "history": 500,
        "timeout": 2.0,
    }
    values.update(overrides)
    return AutoscalingSettings(**values)


@dataclass
class Leader:
    id: str
    leader_loop: LeaderLoop
    reader: StatusReader
    loop: ScalingLoop
    registry: CollectorRegistry
    stop: anyio.Event

    def records(self, term: int | None = None) -> list[ScalingRecord]:
        return [r for r in self.loop.history if term is None or r.term == term]


@dataclass
class World:
    state: InMemoryCoordination
    transport: InMemoryTransport
    members: InMemoryMembership
    reports: InMemoryLoadReports
    tg: TaskGroup
    leases: dict[str, InMemoryMembershipLease] = field(default_factory=dict)

    async def start_leader(
        self, leader_id: str, scaler: Scaler | None, settings: AutoscalingSettings
    ) -> Leader:
        leader: Leader = await self.tg.start(self._run_leader, leader_id, scaler, settings)
        return leader

    async def _run_leader(
        self,
        leader_id: str,
        scaler: Scaler | None,
        settings: AutoscalingSettings,
        *,
        task_status: TaskStatus[Leader] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        async with (
            InMemoryElection(self.state) as election,
            InMemoryMembership(self.state) as membership,
            InMemoryLoadReports(self.state) as reports,
            InMemoryAssignmentStore(self.state) as store,
            InMemoryHoldStore(self.state) as holds,
        ):
            registry = CollectorRegistry()
            loop = ScalingLoop(
                settings=settings,
                partitions=PARTITIONS,
                scaler=scaler,
                membership=membership,
                reports=reports,
                transport=self.transport,
                registry=registry,
            )
            leader_loop = LeaderLoop(
                settings=LeaderSettings(id=leader_id, lease_ttl=1.0, debounce=0.01),
                partitions=PARTITIONS,
                strategy=strategy_named("sticky"),
                election=election,
                membership=membership,
                store=store,
                scaling=loop,
            )
            reader = StatusReader(
                leader_loop=leader_loop,
                election=election,
                membership=membership,
                reports=reports,
                store=store,
                holds=holds,
                transport=self.transport,
                partitions=PARTITIONS,
                backends={"coordination": "memory", "transport": "memory"},
            )
            stop = anyio.Event()
            task_status.started(Leader(leader_id, leader_loop, reader, loop, registry, stop))
            await leader_loop.run(stop)

    async def handler(self, handler_id: str, project_count: int) -> None:
        """A handler as the leader sees one: a member on a lease, reporting stats."""
        if handler_id not in self.leases:
            self.leases[handler_id] = await self.members.join(handler_id, ttl=5.0)
        stats = MemberStats(cpu=5.0, project_count=project_count)
        await self.reports.report(self.leases[handler_id], stats)

    async def publish(self, count: int) -> None:
        for n in range(count):
            await self.transport.publish(
                stamp(
                    f"proj-{n % 5}",
                    [b"{}"],
                    gateway_id="gw",
                    first_sequence=n + 1,
                    message_ids=[uuid.uuid4().hex],
                    received_at=0.0,
                    partitions=PARTITIONS,
                )
            )


@pytest.fixture
async def world() -> AsyncIterator[World]:
    state = InMemoryCoordination()
    async with (
        InMemoryTransport(ack_wait=5.0) as transport,
        InMemoryMembership(state) as members,
        InMemoryLoadReports(state) as reports,
        anyio.create_task_group() as tg,
    ):
        yield World(state, transport, members, reports, tg)
        tg.cancel_scope.cancel()


async def until(check: Callable[[], bool], what: str, within: float = LIMIT) -> None:
    try:
        with anyio.fail_after(within):
            # The loop runs on its own clock; its history has no change event to await.
            while not check():  # noqa: ASYNC110
                await anyio.sleep(0.01)
    except TimeoutError:
        raise AssertionError(f"not within {within} s: {what}") from None


def acting(records: list[ScalingRecord]) -> list[ScalingRecord]:
    return [r for r in records if r.decision in ("up", "down")]


def rules(records: list[ScalingRecord]) -> list[str]:
    return [r.rule for r in records]


# --- the status document ------------------------------------------------------------------


async def test_decisions_with_reasons_appear_in_the_status_document(world: World) -> None:
    scaler = InMemoryScaler(replicas=1)
    await world.handler("h1", 25)
    await world.handler("h2", 25)
    leader = await world.start_leader("l1", scaler, fast())
    await until(lambda: "cooldown" in rules(leader.records()[1:]), "an action, then a hold")

    doc = await leader.reader.document()
    json.dumps(doc)  # the document is JSON as served
    scaling = doc["scaling"]
    assert leader.leader_loop.leadership is not None
    assert scaling["enabled"] is True and scaling["active"] is True
    assert scaling["term"] == leader.leader_loop.leadership.term
    assert (scaling["min_replicas"], scaling["max_replicas"], scaling["replicas"]) == (1, 3, 2)
    assert scaling["thresholds"]["max_project_count"] == 10
    decisions = scaling["decisions"]
    assert [d["at"] for d in decisions] == sorted((d["at"] for d in decisions), reverse=True)
    up = next(d for d in decisions if d["decision"] == "up")
    assert up["rule"] == "projects"
    assert up["reason"] == "scale up: average project_count 25.00 over 2 handlers > 10"
    assert (up["replicas_before"], up["replicas_after"], up["handlers"]) == (1, 2, 2)
    assert up["total_lag"] == 0 and up["error"] is None
    hold = decisions[0]
    assert hold["decision"] == "hold" and hold["rule"] == "cooldown"
    assert hold["reason"].startswith("hold: cooldown, ")
    assert hold["replicas_before"] == hold["replicas_after"] == 2
    assert scaling["cooldown_left"] > 0
    assert scaler.calls == [2]


async def test_a_leader_without_autoscaling_says_so(world: World) -> None:
    scaler = InMemoryScaler(replicas=1)
    leader = await world.start_leader("l1", scaler, fast(enabled=False))
    await world.handler("h1", 100)
    await until(lambda: leader.leader_loop.leadership is not None, "elected")
    await anyio.sleep(0.2)  # ten intervals of a loop that must not run
    doc = await leader.reader.document()
    assert doc["scaling"]["enabled"] is False and doc["scaling"]["decisions"] == []
    assert scaler.calls == []


# --- only the active leader acts ----------------------------------------------------------


async def test_only_the_active_leader_evaluates_and_acts(world: World) -> None:
    """Two leaders share one pool. The standby never evaluates; when the leader's lease
    expires its loop stops at once and the new leader's loop takes over."""
    scaler = InMemoryScaler(replicas=1)
    settings = fast(cooldown=0.1, max_replicas=6)
    first = await world.start_leader("l1", scaler, settings)
    await until(lambda: first.leader_loop.leadership is not None, "l1 elected")
    second = await world.start_leader("l2", scaler, settings)
    await world.handler("h1", 100)  # always asks for +1: every evaluation out of cooldown acts
    first_term = first.leader_loop.leadership.term if first.leader_loop.leadership else -1
    await until(lambda: len(acting(first.records())) >= 2, "l1 acts twice")

    assert not second.loop.active and second.records() == []
    doc = await second.reader.document()
    assert doc["scaling"]["active"] is False and doc["scaling"]["decisions"] == []
    assert {r.term for r in first.records()} == {first_term}

    world.state.expire("l1")  # l1's leadership lease ends as a TTL would

    def new_leader() -> Leader | None:
        for leader in (first, second):
            held = leader.leader_loop.leadership
            if held is not None and held.term > first_term and leader.loop.active:
                return leader
        return None

    await until(lambda: new_leader() is not None, "a new term leads and scales")
    active = new_leader()
    assert active is not None and active.leader_loop.leadership is not None
    standby = second if active is first else first
    new_term = active.leader_loop.leadership.term
    await until(lambda: len(active.records(new_term)) >= 3, "the new leader evaluates")

    assert not standby.loop.active
    assert standby.records(new_term) == []  # it did not evaluate in the other's term
    count = len(standby.loop.history)
    await anyio.sleep(0.2)  # ten intervals: a stopped loop stays stopped
    assert len(standby.loop.history) == count
    # Every action the pool saw came from a leader's loop in its own term, in order.
    acted = sorted(acting(first.records()) + acting(second.records()), key=lambda r: r.at)
    assert scaler.calls == [r.replicas_after for r in acted]
    assert {r.term for r in acted} <= {first_term, new_term}


# --- the policy's guards, through the loop ------------------------------------------------


async def test_cooldown_and_bounds_hold_up_and_down(world: World) -> None:
    scaler = InMemoryScaler(replicas=1)
    settings = fast()
    leader = await world.start_leader("l1", scaler, settings)
    await world.handler("h1", 100)
    await until(lambda: "at-max" in rules(leader.records()), "grown to max_replicas")
    await world.handler("h1", 0)  # idle
    mark = len(leader.records())
    await until(lambda: "at-min" in rules(leader.records()[mark:]), "shrunk to min_replicas")

    assert scaler.calls == [2, 3, 2, 1]
    actions = acting(leader.records())
    assert [(r.rule, r.replicas_before, r.replicas_after) for r in actions] == [
        ("projects", 1, 2),
        ("projects", 2, 3),
        ("low-load", 3, 2),
        ("low-load", 2, 1),
    ]
    for before, after in itertools.pairwise(actions):
        assert after.at - before.at >= settings.cooldown - 0.01  # wall clock vs monotonic
    for record in leader.records():
        assert record.replicas_after is not None
        assert settings.min_replicas <= record.replicas_after <= settings.max_replicas
    at_max = next(r for r in leader.records() if r.rule == "at-max")
    assert at_max.reason.endswith("is at max_replicas 3") and at_max.decision == "hold"


async def test_a_pool_below_min_is_restored_without_any_load(world: World) -> None:
    scaler = InMemoryScaler(replicas=0)
    leader = await world.start_leader("l1", scaler, fast(min_replicas=2))
    await until(lambda: scaler.calls == [2], "straight to min_replicas")
    assert rules(acting(leader.records())) == ["below-min"]


async def test_the_lag_rule_reads_the_transport_backlog(world: World) -> None:
    scaler = InMemoryScaler(replicas=1)
    settings = fast(lag_per_handler=10, max_replicas=4, max_project_count=1000, cooldown=5.0)
    await world.handler("h1", 5)
    await world.publish(35)
    leader = await world.start_leader("l1", scaler, settings)
    await until(lambda: "lag" in rules(leader.records()), "the lag rule acts")
    record = next(r for r in leader.records() if r.rule == "lag")
    assert record.total_lag == 35
    assert record.reason == (
        "scale up: total lag 35 / 10 per handler wants 4 handlers > replicas 1"
    )
    assert scaler.calls == [2]


# --- failures are recorded, not fatal ----------------------------------------------------


async def test_a_failed_action_is_recorded_and_starts_no_cooldown(world: World) -> None:
    """The scaler refuses (a local scaler that was never opened): every evaluation
    tries again and records why it failed."""
    scaler = LocalProcessScaler()  # not entered: replicas() is 0, scale_to() raises
    leader = await world.start_leader("l1", scaler, fast())
    await until(lambda: len(leader.records()) >= 3, "three evaluations")
    for record in leader.records()[:3]:
        assert (record.decision, record.rule) == ("error", "below-min")
        assert (
            record.error
            == "RuntimeError: LocalProcessScaler is not open: use it as `async with ...`"
        )
        assert record.reason.startswith("scale up: replicas 0 < min_replicas 1; failed: ")
        assert record.replicas_after == 0
    assert leader.loop.active


async def test_an_unreadable_store_is_recorded_and_the_loop_goes_on(world: World) -> None:
    scaler = InMemoryScaler(replicas=1)
    leader = await world.start_leader("l1", scaler, fast())
    await world.handler("h1", 5)
    await until(lambda: len(leader.records()) >= 2, "evaluating")
    world.state.set_available(False)
    await until(lambda: "read-failed" in rules(leader.records()), "a failed read", within=2.0)
    world.state.set_available(True)
    mark = len(leader.records())
    await until(lambda: "steady" in rules(leader.records()[mark:]), "evaluating again")
    failed = next(r for r in leader.records() if r.rule == "read-failed")
    assert failed.decision == "error"
    assert failed.error == "StoreUnavailableError: in-memory store unavailable (members)"


async def test_decisions_are_counted_by_kind_and_rule(world: World) -> None:
    scaler = InMemoryScaler(replicas=1)
    leader = await world.start_leader("l1", scaler, fast())
    await world.handler("h1", 100)
    await until(lambda: "cooldown" in rules(leader.records()), "an action and a hold")

    def count(decision: str, rule: str) -> float:
        labels = {"decision": decision, "rule": rule}
        return leader.registry.get_sample_value("shoal_scaling_decisions_total", labels) or 0.0

    assert count("up", "projects") == 1.0
    assert count("hold", "cooldown") >= 1.0
    assert leader.registry.get_sample_value("shoal_scaling_replicas") == 2.0


# --- configuration -----------------------------------------------------------------------


def test_settings_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in {
        "SHOAL_SCALING_SCALER": "kubernetes",
        "SHOAL_SCALING_INTERVAL": "2",
        "SHOAL_SCALING_CPU_MAX_USAGE": "75",
        "SHOAL_SCALING_MAX_PROJECT_COUNT": "4",
        "SHOAL_SCALING_MIN_REPLICAS": "1",
        "SHOAL_SCALING_MAX_REPLICAS": "3",
        "SHOAL_SCALING_LOW_LOAD_THRESHOLD": "0.5",
        "SHOAL_SCALING_COOLDOWN": "4",
        "SHOAL_SCALING_LAG_PER_HANDLER": "",
    }.items():
        monkeypatch.setenv(key, value)
    settings = AutoscalingSettings()
    assert settings.active and settings.scaler == "kubernetes"
    policy = settings.policy(partitions=16)
    assert (policy.interval_seconds, policy.cpu_max_usage, policy.max_project_count) == (2, 75, 4)
    assert (policy.min_replicas, policy.max_replicas, policy.low_load_threshold) == (1, 3, 0.5)
    assert (policy.cooldown_seconds, policy.lag_per_handler, policy.partitions) == (4, None, 16)
    monkeypatch.setenv("SHOAL_SCALING_LAG_PER_HANDLER", "500")
    assert AutoscalingSettings().lag_per_handler == 500
    assert AutoscalingSettings().policy(16).lag_per_handler == 500


def test_defaults_are_the_reference_policy_and_scale_nothing() -> None:
    settings = AutoscalingSettings()
    assert settings.scaler == "none" and not settings.active
    assert (settings.interval, settings.cooldown, settings.cpu_max_usage) == (30, 600, 90)
    assert (settings.max_project_count, settings.min_replicas, settings.low_load_threshold) == (
        50,
        2,
        2,
    )


def test_bad_settings_exit_with_the_variable_named(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SHOAL_SCALING_SCALER", "local")
    monkeypatch.setenv("SHOAL_SCALING_MIN_REPLICAS", "5")
    monkeypatch.setenv("SHOAL_SCALING_MAX_REPLICAS", "3")
    with pytest.raises(SystemExit) as info:
        configure_scaling(LeaderContainer())
    assert info.value.code == 2
    assert capsys.readouterr().err == (
        "error: SHOAL_SCALING_MAX_REPLICAS: min_replicas 5 is above max_replicas 3\n"
    )


def test_the_container_selects_the_scaler_by_kind(monkeypatch: pytest.MonkeyPatch) -> None:
    container = LeaderContainer()
    assert container.scaler() is None  # the default: none
    monkeypatch.setenv("SHOAL_SCALING_SCALER", "local")
    monkeypatch.setenv("SHOAL_LOCAL_LOG_DIR", "/tmp/shoal-handlers")
    configure_scaling(container)
    local = container.scaler()
    assert isinstance(local, LocalProcessScaler)
    assert str(local.settings.log_dir) == "/tmp/shoal-handlers"

    container = LeaderContainer()
    monkeypatch.setenv("SHOAL_SCALING_SCALER", "kubernetes")
    monkeypatch.setenv("SHOAL_K8S_DEPLOYMENT", "my-handlers")
    configure_scaling(container)
    kube = container.scaler()  # not entered: nothing connects
    assert isinstance(kube, KubernetesScaler)
    assert kube.settings.deployment == "my-handlers"
