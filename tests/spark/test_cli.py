"""``shoal analytics``: exit codes and output, in-process on the shared Spark session."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from adapters.spark import SparkAnalytics, read_weights_file
from services.cli.main import app
from tests.spark._landing import (
    BASE,
    PARTITIONS,
    Planted,
    empty_table,
    write_uncommitted,
)
from tests.spark.conftest import SKEWED_PARTITIONS

runner = CliRunner()


def run(*args: str) -> Result:
    return runner.invoke(app, ["analytics", *args])


@pytest.fixture(autouse=True)
def _spark(analytics: SparkAnalytics) -> None:
    """The CLI joins the session the fixture started (one per process)."""


def test_audit_finds_the_loss_and_exits_1(planted_dir: Path) -> None:
    result = run("audit", str(planted_dir), "--drain-marker", "--no-ledger", "--quiet")
    assert result.exit_code == 1, result.output
    out = result.stdout
    assert "accepted from sequence numbers" in out
    for line in ("accepted     11,993", "lost              9", "duplicated        5"):
        assert " ".join(line.split()) in " ".join(out.split())
    assert "gw-a/proj-0 5..6" in out
    assert "LOST: 9 accepted messages never landed" in out
    assert "limit: losses after a series' last landed sequence" in out


def test_audit_json_uses_the_ledger_found_in_the_data_dir(planted_dir: Path) -> None:
    result = run("audit", str(planted_dir), "--drain-marker", "--json")
    assert result.exit_code == 1, result.output
    document = json.loads(result.stdout)
    assert document["accepted_from"] == "ledger"
    assert (document["accepted"], document["lost"], document["refused"]) == (11_995, 14, 8)
    assert document["ok"] is False


def test_audit_as_of_leaves_in_flight_out(planted_dir: Path) -> None:
    as_of = str(BASE + 90.05 + 60)
    result = run("audit", str(planted_dir), "--as-of", as_of, "--settle", "60", "--json")
    document = json.loads(result.stdout)
    assert (document["lost"], document["in_flight"]) == (3, 11)
    assert document["cutoff"] == "2026-11-21T12:01:30.050000Z"


def test_audit_clean_exits_0(clean_dir: Path) -> None:
    result = run("audit", str(clean_dir), "--as-of", "now", "--settle", "0", "--quiet")
    assert result.exit_code == 0, result.output
    assert "OK: nothing accepted was lost" in result.stdout
    assert "≥ 3.30 nines" in result.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--drain-marker", "--as-of", "now"], "exclude each other"),
        (["--as-of", "yesterday-ish"], "is not a time"),
    ],
)
def test_audit_usage_errors_exit_2(planted_dir: Path, args: list[str], message: str) -> None:
    result = run("audit", str(planted_dir), *args)
    assert result.exit_code == 2
    assert message in result.output


COMMANDS = (
    ["audit"],
    ["report", "--out", "report-out"],
    ["weights", "--out", "w.json"],
)


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
def test_missing_directory_exits_2(tmp_path: Path, command: list[str]) -> None:
    result = run(command[0], str(tmp_path / "nope"), *command[1:])
    assert result.exit_code == 2
    assert "does not exist" in result.stderr
    a_file = tmp_path / "a-file"
    a_file.write_text("not a directory")
    result = run(command[0], str(a_file), *command[1:])
    assert result.exit_code == 2
    assert "is not a directory" in result.stderr


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
def test_no_delta_table_exits_2(tmp_path: Path, command: list[str], planted: Planted) -> None:
    """Nothing says which files are data: refused before Spark reads anything, not read as
    an empty table."""
    result = run(command[0], str(tmp_path), *command[1:], "-q")
    assert result.exit_code == 2, result.output
    assert "is not a Delta table (no version in _delta_log/)" in result.stderr
    write_uncommitted(tmp_path, planted.rows[:100])
    result = run(command[0], str(tmp_path), *command[1:], "-q")
    assert result.exit_code == 2, result.output
    assert "is not a Delta table: it holds Parquet files" in result.stderr


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
def test_unreadable_log_exits_2(tmp_path: Path, command: list[str]) -> None:
    log = tmp_path / "_delta_log"
    log.mkdir()
    (log / f"{0:020d}.json").write_text('{"commitInfo": {"torn')
    result = run(command[0], str(tmp_path), *command[1:], "-q")
    assert result.exit_code == 2, result.output
    assert f"cannot read the landing table at {tmp_path}: " in result.stderr
    assert len(result.stderr.splitlines()) == 1  # the reason, not delta-rs's backtrace


def test_another_master_in_the_same_process_exits_3(clean_dir: Path) -> None:
    result = run("audit", str(clean_dir), "--master", "local[1]", "--quiet")
    assert result.exit_code == 3
    assert "one session per process" in result.stderr


def test_report_writes_json_and_html(planted_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "report"
    result = run("report", str(planted_dir), "--out", str(out), "-p", str(PARTITIONS))
    assert result.exit_code == 0, result.output
    document = json.loads((out / "report.json").read_text())
    assert document["summary"]["rows"] == 11_989
    page = (out / "report.html").read_text()
    assert "<svg" in page and "<script" not in page
    assert "partition skew max/mean" in result.stdout
    assert "latency ms p50" in result.stdout


def test_report_partitions_below_the_data_exit_2(planted_dir: Path, tmp_path: Path) -> None:
    result = run("report", str(planted_dir), "--out", str(tmp_path), "-p", "4", "-q")
    assert result.exit_code == 2
    assert "pass the stream's P" in result.stderr


def test_weights_writes_the_file(skewed_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "weights.json"
    result = run(
        "weights", str(skewed_dir), "--out", str(out), "-p", str(SKEWED_PARTITIONS),
        "--members", "4", "-q",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    weights = read_weights_file(out, SKEWED_PARTITIONS)
    assert max(weights, key=lambda p: weights[p]) == 1  # the 4000-row partition
    assert "4 members: max/mean rows per member sticky" in result.stdout


def test_weights_of_an_empty_table_exits_1(tmp_path: Path) -> None:
    empty_table(tmp_path)
    result = run("weights", str(tmp_path), "--out", str(tmp_path / "w.json"), "-q")
    assert result.exit_code == 1
    assert "no data rows landed" in result.stderr


def test_jvm_error_reaches_the_user(clean_dir: Path) -> None:
    """A bad setting kills the JVM at start: the CLI shows the JVM's own words, exit 3."""
    env = {**os.environ, "SHOAL_SPARK_EXTRA_CONF": json.dumps({"spark.driver.memory": "banana"})}
    done = subprocess.run(
        [sys.executable, "-m", "services.cli.main", "analytics", "audit", str(clean_dir), "-q"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 3, done.stderr
    assert "JAVA_GATEWAY_EXITED" in done.stderr
    assert "Invalid maximum heap size: -Xmxbanana" in done.stderr
