"""The consumption modes' rules (core.modes) and the broadcast strategy."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.assignment import STRATEGIES, AssignmentRequest
from core.assignment._broadcast import BroadcastStrategy
from core.model import Assignment, Member
from core.modes import (
    ConsumptionMode,
    autoscaling_problem,
    broadcast_id_problem,
    broadcast_zone,
    contends_for_holds,
    mode_problem,
    position_of,
    retention_problem,
)
from services.common.backends import transport_features
from services.common.settings import ShoalSettings, load_settings
from tests.unit.test_strategies import EXCLUSIVE as ONE_OWNER_STRATEGIES

EXCLUSIVE, SHARED, BROADCAST = (
    ConsumptionMode.EXCLUSIVE,
    ConsumptionMode.SHARED,
    ConsumptionMode.BROADCAST,
)
SINGLE_OWNER = sorted(set(STRATEGIES) - {"fan-out", "broadcast"})
NATS, KAFKA = transport_features("nats"), transport_features("kafka")


@pytest.mark.parametrize("transport", ["nats", "kafka"])
@pytest.mark.parametrize("strategy", SINGLE_OWNER)
def test_exclusive_runs_when_strategy_gives_one_owner(strategy: str, transport: str) -> None:
    assert mode_problem(EXCLUSIVE, strategy, transport_features(transport)) is None


def test_exclusive_admits_exactly_the_strategies_the_invariant_suite_holds_to_one_owner() -> None:
    admitted = {s for s in STRATEGIES if mode_problem(EXCLUSIVE, s, NATS) is None}
    assert admitted == ONE_OWNER_STRATEGIES


@pytest.mark.parametrize("strategy", ["fan-out", "broadcast"])
def test_exclusive_is_refused_when_strategy_gives_several_owners(strategy: str) -> None:
    problem = mode_problem(EXCLUSIVE, strategy, NATS)
    assert problem is not None and strategy in problem


def test_shared_runs_when_fan_out_on_nats() -> None:
    assert mode_problem(SHARED, "fan-out", NATS) is None


def test_shared_is_refused_on_kafka_naming_share_groups() -> None:
    problem = mode_problem(SHARED, "fan-out", KAFKA)
    assert problem is not None and "KIP-932" in problem


@pytest.mark.parametrize("strategy", [*SINGLE_OWNER, "broadcast"])
def test_shared_is_refused_when_strategy_is_not_fan_out(strategy: str) -> None:
    problem = mode_problem(SHARED, strategy, NATS)
    assert problem is not None and "fan-out" in problem


@pytest.mark.parametrize("transport", ["nats", "kafka"])
def test_broadcast_runs_when_broadcast_strategy_on_either_transport(transport: str) -> None:
    assert mode_problem(BROADCAST, "broadcast", transport_features(transport)) is None


@pytest.mark.parametrize("strategy", [*SINGLE_OWNER, "fan-out"])
def test_broadcast_is_refused_when_strategy_divides_partitions(strategy: str) -> None:
    assert mode_problem(BROADCAST, strategy, NATS) is not None


@given(st.sampled_from(list(ConsumptionMode)), st.text(min_size=1, max_size=8))
def test_only_broadcast_has_a_position_of_its_own_and_only_exclusive_contends(
    mode: ConsumptionMode, member_id: str
) -> None:
    assert position_of(mode, member_id) == (member_id if mode is BROADCAST else None)
    assert contends_for_holds(mode) is (mode is EXCLUSIVE)


_ids = st.lists(st.sampled_from([f"h{i}" for i in range(12)]), min_size=1, unique=True)


@given(st.integers(min_value=1, max_value=64), _ids, _ids)
def test_broadcast_gives_every_member_every_partition_and_moves_only_joiners_and_leavers(
    partitions: int, before: list[str], after: list[str]
) -> None:
    strategy = BroadcastStrategy()
    empty = Assignment.empty(partitions)
    first = strategy.assign(
        AssignmentRequest(partitions, tuple(Member(i) for i in before), empty)
    ).assignment
    result = strategy.assign(
        AssignmentRequest(partitions, tuple(Member(i) for i in reversed(after)), first)
    )

    assert result.assignment.owners == (tuple(sorted(after)),) * partitions
    everything = tuple(range(partitions))
    for member_id in set(before) | set(after):
        joined, left = member_id not in before, member_id not in after
        assert result.granted.get(member_id, ()) == (everything if joined else ())
        assert result.revoked.get(member_id, ()) == (everything if left else ())


def _load(monkeypatch: pytest.MonkeyPatch, **env: str) -> ShoalSettings:
    for name in ("SHOAL_CONSUMPTION_MODE", "SHOAL_STRATEGY", "SHOAL_TRANSPORT"):
        monkeypatch.delenv(name, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(f"SHOAL_{key.upper()}", value)
    return load_settings(ShoalSettings)


def test_settings_default_to_exclusive(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _load(monkeypatch).consumption_mode is EXCLUSIVE


def test_settings_take_shared_with_fan_out_on_nats(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = _load(monkeypatch, consumption_mode="shared", strategy="fan-out")
    assert settings.consumption_mode is SHARED


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({"consumption_mode": "shared", "strategy": "fan-out", "transport": "kafka"}, "KIP-932"),
        ({"strategy": "fan-out"}, "exclusive"),
        ({"consumption_mode": "broadcast"}, "needs strategy broadcast"),
        ({"consumption_mode": "everyone"}, "SHOAL_CONSUMPTION_MODE"),
    ],
)
def test_settings_refuse_a_mode_that_does_not_fit_at_start_up(
    env: dict[str, str],
    says: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exited:
        _load(monkeypatch, **env)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: SHOAL_CONSUMPTION_MODE") and says in err


def test_a_broadcast_id_must_be_chosen_and_safe_in_broker_names() -> None:
    assert broadcast_id_problem("copy-1_b", chosen=True) is None
    assert "SHOAL_HANDLER_ID" in (broadcast_id_problem("h-host-12", chosen=False) or "")
    for unsafe in ("h.host", "h host", "h*", "x" * 65, ""):
        assert broadcast_id_problem(unsafe, chosen=True) is not None


@pytest.mark.parametrize("mode", list(ConsumptionMode))
def test_only_broadcast_refuses_autoscaling(mode: ConsumptionMode) -> None:
    assert (autoscaling_problem(mode) is None) is (mode is not BROADCAST)


@pytest.mark.parametrize("mode", list(ConsumptionMode))
def test_only_broadcast_needs_a_log_that_keeps_acked_messages(mode: ConsumptionMode) -> None:
    assert retention_problem(mode, deleted_on_ack=False) is None
    assert (retention_problem(mode, deleted_on_ack=True) is None) is (mode is not BROADCAST)


@given(st.sampled_from(["/var/data", "var/up/run", "s3://bucket/zone", "s3://b/a/b/"]))
def test_a_broadcast_table_lives_beside_the_zone_never_inside_it(zone: str) -> None:
    table = broadcast_zone(zone, "h1")
    root = zone.rstrip("/")
    assert table == f"{root}-broadcast/h1"
    assert not table.startswith(root + "/"), "not inside the group's zone"


@pytest.mark.parametrize("zone", ["s3://bucket", "s3://bucket/", "/"])
def test_a_zone_with_no_folder_beside_it_takes_no_broadcast_table(zone: str) -> None:
    with pytest.raises(ValueError, match="broadcast"):
        broadcast_zone(zone, "h1")
