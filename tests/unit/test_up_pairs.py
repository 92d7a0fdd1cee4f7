"""`shoal up`'s backend pairs: which servers each runs on."""

from __future__ import annotations

import pytest

from services.cli._up import SERVER_KINDS, servers_for
from services.cli.main import Coordination, Transport


@pytest.mark.parametrize(
    ("coordination", "transport", "servers"),
    [
        ("nats", "nats", ("nats",)),
        ("kafka", "kafka", ("kafka",)),
        ("etcd", "nats", ("etcd", "nats")),
        ("redis", "kafka", ("redis", "kafka")),
        ("nats", "kafka", ("nats", "kafka")),
    ],
)
def test_a_pair_runs_one_server_per_kind(
    coordination: str, transport: str, servers: tuple[str, ...]
) -> None:
    assert servers_for(coordination, transport) == servers


def test_every_choice_of_the_cli_names_a_server_shoal_up_can_start() -> None:
    assert {*Coordination, *Transport} <= set(SERVER_KINDS)
