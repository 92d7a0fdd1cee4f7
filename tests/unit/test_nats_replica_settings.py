"""Replica counts come from environment variables as text: ``SHOAL_NATS_REPLICAS=3`` and
``SHOAL_NATS_KV_REPLICAS=3`` (compose's and the Kubernetes manifests' layout) are read as 3,
and a count the field does not allow is still refused."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from adapters._nats_settings import NatsSettings
from adapters.natskv import NatsKvSettings


def test_three_replicas_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHOAL_NATS_REPLICAS", "3")
    monkeypatch.setenv("SHOAL_NATS_KV_REPLICAS", "3")
    assert NatsSettings().replicas == 3
    kv = NatsKvSettings()
    assert kv.replicas == 3
    assert kv.nats.replicas == 3


@pytest.mark.parametrize(
    ("variable", "value"), [("SHOAL_NATS_REPLICAS", "2"), ("SHOAL_NATS_KV_REPLICAS", "three")]
)
def test_a_count_not_offered_is_refused(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(ValidationError, match="replicas"):
        NatsKvSettings()
