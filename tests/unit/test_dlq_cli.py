"""``shoal dlq``'s refusals, through typer's CliRunner: what is asked wrongly changes
nothing and says why in one line. (The commands themselves run against real brokers in
the contract suite and the fault matrix's poison row.)"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from infra.local.servers import free_port
from services.cli.main import app

runner = CliRunner()


@pytest.mark.parametrize("command", ["replay", "purge"])
def test_replay_and_purge_need_ids_or_all(command: str) -> None:
    result = runner.invoke(app, ["dlq", command])
    assert result.exit_code == 2
    assert "name the message ids, or --all" in result.output


@pytest.mark.parametrize("command", ["replay", "purge"])
def test_replay_and_purge_refuse_ids_with_all(command: str) -> None:
    result = runner.invoke(app, ["dlq", command, "m1", "--all"])
    assert result.exit_code == 2
    assert "not both" in result.output


@pytest.mark.parametrize("transport", ["nats", "kafka"])
def test_an_unreachable_broker_is_one_error_line_and_exit_1(
    transport: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    port = free_port()
    monkeypatch.setenv("SHOAL_STATE_DIR", str(tmp_path))
    monkeypatch.setenv("SHOAL_TRANSPORT", transport)
    monkeypatch.setenv("SHOAL_NATS_URL", f"nats://127.0.0.1:{port}")
    monkeypatch.setenv("SHOAL_NATS_CONNECT_TIMEOUT", "2")
    monkeypatch.setenv("SHOAL_KAFKA_BOOTSTRAP_SERVERS", f"127.0.0.1:{port}")
    monkeypatch.setenv("SHOAL_KAFKA_CONNECT_TIMEOUT", "2")
    result = runner.invoke(app, ["dlq", "list"])
    assert result.exit_code == 1
    assert result.output.startswith(f"error: {transport}: ")
    assert "Traceback" not in result.output


def test_without_settings_it_reaches_the_broker_of_the_running_shoal_up(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    url = f"nats://127.0.0.1:{free_port()}"  # nothing listens: the error names what was used
    state = {"pid": os.getpid(), "status_urls": [], "transport_env": {"SHOAL_NATS_URL": url}}
    (tmp_path / "up.json").write_text(json.dumps(state))
    monkeypatch.setenv("SHOAL_STATE_DIR", str(tmp_path))
    for name in ("SHOAL_TRANSPORT", "SHOAL_NATS_URL"):
        monkeypatch.setenv(name, "")  # recorded, so what the command sets is undone too
        monkeypatch.delenv(name)
    monkeypatch.setenv("SHOAL_NATS_CONNECT_TIMEOUT", "2")
    result = runner.invoke(app, ["dlq", "list"])
    assert result.exit_code == 1
    assert url in result.output
    assert os.environ.get("SHOAL_NATS_URL") == url  # taken from the state file
