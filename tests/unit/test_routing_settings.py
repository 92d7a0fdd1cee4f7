"""``RoutingSettings``: SHOAL_CLUSTERS and SHOAL_CLUSTER are checked at start."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from services.common.settings import RoutingSettings


def test_off_without_a_cluster_map(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SHOAL_CLUSTERS", raising=False)
    assert RoutingSettings().cluster_map is None


def test_the_cluster_map_and_the_own_cluster_are_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHOAL_CLUSTERS", "east=nats://a:1|nats://b:2,west=nats://c:3")
    monkeypatch.setenv("SHOAL_CLUSTER", "west")
    routing = RoutingSettings()
    assert routing.cluster_map is not None and routing.cluster_map.names == ("east", "west")
    assert routing.cluster == "west"


@pytest.mark.parametrize(
    ("clusters", "own", "complaint"),
    [
        ("east=nats://a:1", "north", "'north' is not one of"),
        ("east", "east", "not NAME=ADDRESS"),
    ],
)
def test_bad_cluster_settings_are_refused(
    monkeypatch: pytest.MonkeyPatch, clusters: str, own: str, complaint: str
) -> None:
    monkeypatch.setenv("SHOAL_CLUSTERS", clusters)
    monkeypatch.setenv("SHOAL_CLUSTER", own)
    with pytest.raises(ValidationError, match=complaint):
        RoutingSettings()
