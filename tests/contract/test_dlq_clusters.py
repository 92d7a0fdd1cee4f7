"""``shoal dlq`` with ``SHOAL_CLUSTERS``, on two nats-servers as two datacenters: each
cluster keeps the dead letters of what was read from it, and the command reads, replays and
purges each letter in its own cluster; a typo or a cluster that does not answer changes
nothing."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import anyio
import pytest
from typer.testing import CliRunner

from adapters.nats import NatsDeadLetterQueue, NatsSettings, NatsTransport
from core.messages import Envelope
from infra.local._testservers import ServerInfo
from infra.local.servers import RunningNats, start_nats
from services.cli.main import app
from tests.contract._nats_streams import delete_streams
from tests.contract._transport import envelope, fetch_n

pytestmark = pytest.mark.nats

runner = CliRunner()
PARTITION = 3


@dataclass(frozen=True)
class Datacenters:
    urls: dict[str, str]
    base: NatsSettings
    west: RunningNats

    def settings(self, cluster: str) -> NatsSettings:
        return self.base.for_cluster(cluster, (self.urls[cluster],))


@pytest.fixture
def dcs(
    nats_server: ServerInfo, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> Iterator[Datacenters]:
    west = start_nats(tmp_path / "west", name="dc-west")
    urls = {"east": nats_server.url, "west": west.url}
    tag = uuid.uuid4().hex[:10]
    env = {
        "SHOAL_STATE_DIR": str(tmp_path / "state"),
        "SHOAL_TRANSPORT": "nats",
        "SHOAL_NATS_URL": urls["east"],
        "SHOAL_NATS_CONNECT_TIMEOUT": "2",
        "SHOAL_NATS_STREAM": f"D{tag}",
        "SHOAL_NATS_SUBJECT_PREFIX": f"d{tag}.data",
        "SHOAL_NATS_DEAD_LETTER_STREAM": f"D{tag}_DLQ",
        "SHOAL_NATS_DEAD_LETTER_PREFIX": f"d{tag}.dlq",
        "SHOAL_CLUSTERS": ",".join(f"{name}={url}" for name, url in urls.items()),
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    settings = NatsSettings()
    try:
        yield Datacenters(urls, settings, west)
    finally:
        west.stop()
        anyio.run(delete_streams, settings)  # east: the session's server


def kill_in(dcs: Datacenters, cluster: str, count: int) -> list[Envelope]:
    """Publish ``count`` messages to ``cluster`` and dead-letter each as a handler would."""
    dead = [envelope(PARTITION, sequence=s) for s in range(1, count + 1)]

    async def main() -> None:
        async with NatsTransport(dcs.settings(cluster)) as transport:
            await transport.publish(dead)
            sub = await transport.open(PARTITION, "h1")
            try:
                for delivery in await fetch_n(sub, count):
                    await delivery.dead_letter("unprocessable")
            finally:
                await sub.close()

    anyio.run(main)
    return dead


def held(dcs: Datacenters) -> dict[str, list[str]]:
    """The message ids each cluster's dead-letter store holds, read without the CLI."""

    async def main() -> dict[str, list[str]]:
        found: dict[str, list[str]] = {}
        for cluster in dcs.urls:
            async with NatsDeadLetterQueue(dcs.settings(cluster)) as queue:
                found[cluster] = [letter.envelope.message_id for letter in await queue.letters()]
        return found

    return anyio.run(main)


def backlog(dcs: Datacenters, cluster: str) -> int:
    async def main() -> int:
        async with NatsTransport(dcs.settings(cluster)) as transport:
            return await transport.backlog(PARTITION)

    return anyio.run(main)


def test_list_and_show_read_every_cluster_and_name_the_cluster_of_each_letter(
    dcs: Datacenters,
) -> None:
    east, west = kill_in(dcs, "east", 2), kill_in(dcs, "west", 1)
    listed = runner.invoke(app, ["dlq", "list", "--json"])
    assert listed.exit_code == 0, listed.output
    rows = [json.loads(line) for line in listed.output.splitlines()]
    assert sorted((r["cluster"], r["message_id"]) for r in rows) == sorted(
        [("east", e.message_id) for e in east] + [("west", e.message_id) for e in west]
    )
    table = runner.invoke(app, ["dlq", "list"], env={"COLUMNS": "250"})
    assert table.exit_code == 0, table.output
    assert "cluster" in table.output
    assert "3 dead letters" in table.output
    shown = runner.invoke(app, ["dlq", "show", west[0].message_id])
    assert shown.exit_code == 0, shown.output
    document = json.loads(shown.output)
    assert document["cluster"] == "west"
    assert document["payload"] == west[0].payload.decode()


def test_replay_puts_each_letter_back_in_its_own_cluster(dcs: Datacenters) -> None:
    east, west = kill_in(dcs, "east", 2), kill_in(dcs, "west", 2)
    assert (backlog(dcs, "east"), backlog(dcs, "west")) == (0, 0)
    chosen = [east[0].message_id, west[1].message_id]
    replayed = runner.invoke(app, ["dlq", "replay", *chosen])
    assert replayed.exit_code == 0, replayed.output
    assert "replayed 2 messages onto their partitions (east 1, west 1)" in replayed.output
    assert held(dcs) == {"east": [east[1].message_id], "west": [west[0].message_id]}
    assert (backlog(dcs, "east"), backlog(dcs, "west")) == (1, 1)


def test_an_id_no_cluster_holds_changes_nothing_anywhere(dcs: Datacenters) -> None:
    east, west = kill_in(dcs, "east", 1), kill_in(dcs, "west", 1)
    before = held(dcs)
    purged = runner.invoke(app, ["dlq", "purge", east[0].message_id, "m-typo"])
    assert purged.exit_code == 2
    assert "m-typo" in purged.output
    assert "nothing was changed" in purged.output
    assert held(dcs) == before == {"east": [east[0].message_id], "west": [west[0].message_id]}
    every = runner.invoke(app, ["dlq", "purge", "--all"])
    assert every.exit_code == 0, every.output
    assert "purged 2 dead letters (east 1, west 1)" in every.output
    assert held(dcs) == {"east": [], "west": []}


def test_a_cluster_that_does_not_answer_stops_the_command_before_any_change(
    dcs: Datacenters,
) -> None:
    (east,) = kill_in(dcs, "east", 1)
    dcs.west.kill()
    purged = runner.invoke(app, ["dlq", "purge", "--all"])
    assert purged.exit_code == 1
    assert purged.output.startswith("error: nats: cluster west: ")
    assert "Traceback" not in purged.output
    listed = runner.invoke(app, ["dlq", "list"])
    assert listed.exit_code == 1
    assert "cluster west" in listed.output

    async def east_letters() -> list[str]:
        async with NatsDeadLetterQueue(dcs.settings("east")) as queue:
            return [letter.envelope.message_id for letter in await queue.letters()]

    assert anyio.run(east_letters) == [east.message_id]
