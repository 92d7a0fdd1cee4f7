"""``shoal replay`` against real brokers, through typer's CliRunner: the lines it writes are
exactly the window's messages, the file appears whole, a work-queue stream is refused."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import pytest
from aiokafka.admin import AIOKafkaAdminClient  # type: ignore[import-untyped, unused-ignore]
from typer.testing import CliRunner

from adapters.kafka import KafkaHistory, KafkaSettings, KafkaTransport
from adapters.nats import NatsHistory, NatsSettings, NatsTransport
from core.messages import Envelope
from core.partitioning import partition_for
from core.ports import History, Transport
from core.replay import AtPosition, StoredMessage, Window
from infra.local._testservers import ServerInfo
from services.cli.main import app
from tests.contract._nats_streams import delete_streams

runner = CliRunner()
PARTITIONS = 16
PROJECT = "dev-1"
P = partition_for(PROJECT, PARTITIONS)
NEIGHBOUR = next(
    name
    for name in (f"other-{i}" for i in itertools.count())
    if partition_for(name, PARTITIONS) == P
)


@dataclass(frozen=True)
class Broker:
    transport: Any  # () -> a fresh transport (an async context manager)
    history: Any  # () -> a fresh history


def _envelope(project: str, sequence: int) -> Envelope:
    return Envelope(
        message_id=f"m-{uuid.uuid4().hex}",
        project_id=project,
        partition=P,
        gateway_id="gw-1",
        sequence=sequence,
        received_at=time.time(),
        payload=json.dumps({"n": sequence}).encode(),
    )


@pytest.fixture
def nats_broker(
    nats_server: ServerInfo, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> Iterator[Broker]:
    tag = uuid.uuid4().hex[:10]
    env = {
        "SHOAL_TRANSPORT": "nats",
        "SHOAL_NATS_URL": nats_server.url,
        "SHOAL_NATS_STREAM": f"R{tag}",
        "SHOAL_NATS_SUBJECT_PREFIX": f"r{tag}.data",
        "SHOAL_NATS_DEAD_LETTER_STREAM": f"R{tag}_DLQ",
        "SHOAL_NATS_DEAD_LETTER_PREFIX": f"r{tag}.dlq",
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    settings = NatsSettings()
    yield Broker(lambda: NatsTransport(settings), lambda: NatsHistory(settings))

    anyio.run(delete_streams, settings)


@pytest.fixture
def kafka_broker(kafka_server: ServerInfo, monkeypatch: pytest.MonkeyPatch) -> Iterator[Broker]:
    tag = uuid.uuid4().hex[:10]
    env = {
        "SHOAL_TRANSPORT": "kafka",
        "SHOAL_GROUP": f"r{tag}",
        "SHOAL_KAFKA_BOOTSTRAP_SERVERS": kafka_server.endpoint,
        "SHOAL_KAFKA_TOPIC": f"r{tag}.data",
        "SHOAL_KAFKA_DEAD_LETTER_TOPIC": f"r{tag}.dlq",
        "SHOAL_KAFKA_REGISTRATION_TOPIC": f"r{tag}.reg",
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    settings = KafkaSettings(group=f"r{tag}", partitions=PARTITIONS)
    yield Broker(lambda: KafkaTransport(settings), lambda: KafkaHistory(settings))

    async def clean() -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=settings.bootstrap)
        await admin.start()
        try:
            with anyio.move_on_after(10):
                await admin.delete_topics(
                    [settings.topic, settings.dead_letter_topic, settings.registration_topic]
                )
        finally:
            await admin.close()

    anyio.run(clean)


@pytest.fixture(
    params=[
        pytest.param("nats", marks=pytest.mark.nats),
        pytest.param("kafka", marks=pytest.mark.kafka),
    ]
)
def broker(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> Broker:
    monkeypatch.setenv("SHOAL_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("SHOAL_PARTITIONS", str(PARTITIONS))
    found: Broker = request.getfixturevalue(f"{request.param}_broker")
    return found


def _publish_slices(broker: Broker) -> tuple[list[Envelope], list[StoredMessage]]:
    """Three slices of the project's messages (a neighbour's in between); returns the
    middle slice and everything stored on the partition, as the broker stamped it."""
    slices = [[_envelope(PROJECT, 3 * k + i) for i in (1, 2, 3)] for k in range(3)]

    async def main() -> list[StoredMessage]:
        transport: AbstractAsyncContextManager[Transport] = broker.transport()
        async with transport as t:
            for envelopes in slices:
                await t.publish([*envelopes[:2], _envelope(NEIGHBOUR, 1), envelopes[2]])
                await anyio.sleep(0.005)  # apart on a millisecond clock
        history: AbstractAsyncContextManager[History] = broker.history()
        async with history as h:
            return [m async for m in h.read(P, Window(AtPosition(0)))]

    stored = anyio.run(main)
    return slices[1], stored


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="microseconds")


def test_a_time_window_of_a_project_lands_in_the_file_exactly(
    broker: Broker, tmp_path: Path
) -> None:
    middle, stored = _publish_slices(broker)
    start = next(m for m in stored if m.envelope == middle[0])
    end = next(m for m in stored if m.envelope.sequence == middle[-1].sequence + 1)
    out = tmp_path / "replay.jsonl"
    result = runner.invoke(
        app,
        [
            "replay",
            "--project",
            PROJECT,
            "--from",
            _iso(start.stored_at),
            "--to",
            _iso(end.stored_at),
            "--to-file",
            str(out),
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [line["id"] for line in lines] == [e.message_id for e in middle]
    assert {line["project"] for line in lines} == {PROJECT}
    assert [line["payload"] for line in lines] == [e.payload.decode() for e in middle]
    summary = json.loads(result.stderr)
    assert summary["count"] == 3 and summary["partition"] == P
    assert summary["positions"] == [lines[0]["position"], lines[-1]["position"]]
    assert result.stdout == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["replay.jsonl"]  # no temporary left


def test_a_position_window_of_a_partition_goes_to_stdout(broker: Broker) -> None:
    middle, stored = _publish_slices(broker)
    start = next(m for m in stored if m.envelope == middle[0])
    end = next(m for m in stored if m.envelope == middle[-1])
    result = runner.invoke(
        app,
        ["replay", "--partition", str(P), "--from", str(start.position), "--to", str(end.position)],
    )
    assert result.exit_code == 0, result.output
    ids = [json.loads(line)["id"] for line in result.stdout.splitlines()]
    inside = [m for m in stored if start.position <= m.position < end.position]
    assert ids == [m.envelope.message_id for m in inside]
    assert NEIGHBOUR in {m.envelope.project_id for m in inside}  # the whole partition
    assert result.stderr.startswith(f"replayed {len(inside)} messages of partition {P}")


@pytest.mark.nats
def test_a_work_queue_stream_is_refused_with_how_to_switch(
    nats_broker: Broker, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("SHOAL_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("SHOAL_PARTITIONS", str(PARTITIONS))
    monkeypatch.setenv("SHOAL_NATS_RETENTION", "workqueue")
    settings = NatsSettings()

    async def publish() -> None:
        async with NatsTransport(settings) as t:
            await t.publish([_envelope(PROJECT, 1)])

    anyio.run(publish)
    out = tmp_path / "replay.jsonl"
    result = runner.invoke(
        app, ["replay", "--project", PROJECT, "--from", "0", "--to-file", str(out)]
    )
    assert result.exit_code == 1
    assert "SHOAL_NATS_RETENTION=limits" in result.output
    assert not any(p.suffix in (".jsonl", ".tmp") for p in tmp_path.iterdir())


@pytest.mark.nats
def test_a_reader_that_stops_early_ends_the_replay_quietly(
    nats_broker: Broker, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``shoal replay ... | head -1``: the pipe closes while lines are still coming."""
    monkeypatch.setenv("SHOAL_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("SHOAL_PARTITIONS", str(PARTITIONS))

    async def publish() -> None:
        transport: AbstractAsyncContextManager[Transport] = nats_broker.transport()
        async with transport as t:
            for k in range(20):  # about 400 KB of lines: far more than a pipe buffers
                await t.publish([_envelope(PROJECT, 100 * k + i) for i in range(100)])

    anyio.run(publish)
    command = [sys.executable, "-c", "from services.cli.main import main; main()"]
    with subprocess.Popen(
        [*command, "replay", "--project", PROJECT, "--from", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    ) as reader:
        assert reader.stdout is not None and reader.stderr is not None
        assert json.loads(reader.stdout.readline())["project"] == PROJECT
        reader.stdout.close()
        errors = reader.stderr.read().decode()
        assert reader.wait(timeout=60) == 0, errors
    assert errors == ""
