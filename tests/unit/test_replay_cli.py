"""``shoal replay``'s refusals, through typer's CliRunner: what is asked wrongly changes
nothing (no file appears) and says why in one line. (Replays against real brokers are in
``tests/contract/test_replay_cli.py``.)"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from infra.local.servers import free_port
from services.cli.main import app

runner = CliRunner()


@pytest.fixture(autouse=True)
def no_running_stack(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SHOAL_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("SHOAL_TRANSPORT", "nats")
    monkeypatch.setenv("SHOAL_NATS_URL", f"nats://127.0.0.1:{free_port()}")
    monkeypatch.setenv("SHOAL_NATS_CONNECT_TIMEOUT", "2")
    monkeypatch.setenv("SHOAL_PARTITIONS", "128")


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--from", "0"], "name --partition or --project, exactly one"),
        (["--partition", "3", "--project", "p", "--from", "0"], "exactly one"),
        (["--partition", "3", "--from", "yesterday"], "ISO-8601"),
        (["--partition", "3", "--from", "-1h", "--to", "-2h"], "--to -2h is before --from -1h"),
        (["--partition", "3", "--from", "9", "--to", "4"], "--to 4 is before --from 9"),
        (["--partition", "128", "--from", "0"], "partition 128 does not exist: 0..127"),
        (["--partition", "-1", "--from", "0"], "partition -1 does not exist"),
        (["--project", "a b", "--from", "0"], "is not a project id"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(
    args: list[str], says: str, tmp_path: Path
) -> None:
    out = tmp_path / "out.jsonl"
    result = runner.invoke(app, ["replay", *args, "--to-file", str(out)])
    assert result.exit_code == 2, result.output
    assert result.output.startswith("error: ")
    assert says in result.output
    assert list(tmp_path.iterdir()) == [], "something was written"


def test_from_is_required() -> None:
    result = runner.invoke(app, ["replay", "--partition", "3"])
    assert result.exit_code == 2
    assert "--from" in result.output


def test_a_file_in_a_missing_directory_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "missing" / "out.jsonl"
    args = ["replay", "--partition", "3", "--from", "0", "--to-file", str(out)]
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert "is not a directory" in result.output


def test_an_unreachable_broker_is_exit_1_and_leaves_no_file(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    result = runner.invoke(
        app, ["replay", "--project", "dev-1", "--from", "-10m", "--to-file", str(out)]
    )
    assert result.exit_code == 1
    assert result.output.startswith("error: nats: ")
    assert "Traceback" not in result.output
    assert list(tmp_path.iterdir()) == [], "a partial or temporary file was left"


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
    result = runner.invoke(app, ["replay", "--partition", "0", "--from", "0"])
    assert result.exit_code == 1
    assert url in result.output
