"""The ``shoal`` command line: partition and simulate, through typer's CliRunner."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from services.cli.main import app, main

runner = CliRunner()

IDS = ["project-1", "sensor_42", "café", "проект-7", "项目", "🚀rocket", ""]
EXCLUSIVE = ("modulo", "range", "consistent-hash", "sticky", "weighted")


def expected_partition(project_id: str, partitions: int) -> int:
    """The reference function written out independently: sha256 hex as an integer, mod P."""
    return int(hashlib.sha256(project_id.encode("utf-8")).hexdigest(), 16) % partitions


def run(*args: str) -> Result:
    return runner.invoke(app, list(args))


def simulate_json(*args: str) -> dict[str, Any]:
    result = run("simulate", "--json", *args)
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert isinstance(document, dict)
    return document


def assert_usage_error(result: Result, *fragments: str) -> None:
    """Exit code 2, nothing on stdout, one line on stderr naming the problem, no traceback."""
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit)
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    assert "Traceback" not in result.stderr
    for fragment in fragments:
        assert fragment in lines[0]


# --- partition --------------------------------------------------------------------------


@pytest.mark.parametrize("partitions", [1, 7, 128, 1000])
def test_partition_prints_sha256_mod_p_when_ids_include_non_ascii(partitions: int) -> None:
    result = run("partition", *IDS, "--partitions", str(partitions))

    assert result.exit_code == 0, result.output
    expected = [f"{i}\t{expected_partition(i, partitions)}" for i in IDS]
    assert result.stdout.splitlines() == expected


def test_partition_uses_128_partitions_when_no_option_given() -> None:
    result = run("partition", "project-1", "项目")

    assert result.stdout.splitlines() == [
        f"project-1\t{expected_partition('project-1', 128)}",
        f"项目\t{expected_partition('项目', 128)}",
    ]


@pytest.mark.parametrize("partitions", ["0", "-3"])
def test_partition_exits_2_when_partitions_below_one(partitions: str) -> None:
    assert_usage_error(run("partition", "abc", "--partitions", partitions), "partitions")


# --- simulate: the acceptance scenario --------------------------------------------------


def test_simulate_sticky_moves_the_minimum_when_one_of_four_leaves_24_partitions() -> None:
    document = simulate_json("--partitions", "24", "--consumers", "4", "--leave", "c2")

    sticky = document["strategies"]["sticky"]
    assert (sticky["moved"], sticky["minimum"]) == (6, 6)
    assert (sticky["max_load"], sticky["min_load"]) == (8, 8)


def test_simulate_range_moves_at_least_8_when_one_of_four_leaves_24_partitions() -> None:
    document = simulate_json("--partitions", "24", "--consumers", "4", "--leave", "c2")

    assert document["strategies"]["range"]["moved"] >= 8


# --- simulate: JSON shape and meaning ----------------------------------------------------


def test_simulate_prints_one_json_object_of_the_documented_shape_when_json() -> None:
    document = simulate_json("--partitions", "24", "--consumers", "4", "--leave", "c2")

    assert set(document) == {"scenario", "strategies"}
    assert tuple(document["strategies"]) == EXCLUSIVE
    for report in document["strategies"].values():
        assert set(report) == {
            "before",
            "after",
            "moved",
            "minimum",
            "max_load",
            "min_load",
            "seconds",
        }
        assert set(report["before"]) == {"c1", "c2", "c3", "c4"}
        assert set(report["after"]) == {"c1", "c3", "c4"}
        for key in ("moved", "minimum", "max_load", "min_load"):
            assert isinstance(report[key], int)
        assert isinstance(report["seconds"], float)
        assert report["seconds"] >= 0


@pytest.mark.parametrize("strategy", EXCLUSIVE)
def test_simulate_reports_consistent_numbers_when_exclusive_strategy(strategy: str) -> None:
    document = simulate_json("--partitions", "40", "--consumers", "3", "--join", "2")
    report = document["strategies"][strategy]

    for side in ("before", "after"):
        owned = sorted(p for parts in report[side].values() for p in parts)
        assert owned == list(range(40)), f"{side}: every partition exactly once"
    owner_before = {p: m for m, parts in report["before"].items() for p in parts}
    owner_after = {p: m for m, parts in report["after"].items() for p in parts}
    assert report["moved"] == sum(owner_before[p] != owner_after[p] for p in range(40))
    loads = [len(parts) for parts in report["after"].values()]
    assert (report["max_load"], report["min_load"]) == (max(loads), min(loads))
    if report["max_load"] - report["min_load"] <= 1:
        assert report["moved"] >= report["minimum"], "no balanced assignment moves fewer"


def test_simulate_gives_the_same_assignment_when_member_crashes_instead_of_leaving() -> None:
    left = simulate_json("--partitions", "30", "--consumers", "5", "--leave", "c3")
    crashed = simulate_json("--partitions", "30", "--consumers", "5", "--crash", "c3")

    for name in EXCLUSIVE:
        for key in ("before", "after", "moved", "minimum"):
            assert left["strategies"][name][key] == crashed["strategies"][name][key]
    assert "c3 leaves" in left["scenario"]["description"]
    assert "c3 crashes" in crashed["scenario"]["description"]


def test_simulate_names_joiners_after_the_initial_members_when_join_given() -> None:
    document = simulate_json("--partitions", "16", "--consumers", "2", "--join", "2")

    assert set(document["strategies"]["sticky"]["after"]) == {"c1", "c2", "c3", "c4"}


def test_simulate_sticky_moves_the_minimum_and_modulo_most_when_run_with_defaults() -> None:
    document = simulate_json()

    assert document["scenario"]["partitions"] == 128
    assert document["scenario"]["members_before"] == ["c1", "c2", "c3", "c4"]
    assert document["scenario"]["joined"] == ["c5"]
    reports = document["strategies"]
    assert reports["sticky"]["moved"] == reports["sticky"]["minimum"]
    assert reports["sticky"]["max_load"] - reports["sticky"]["min_load"] <= 1
    assert reports["modulo"]["moved"] == max(r["moved"] for r in reports.values())
    assert reports["modulo"]["moved"] > 3 * reports["sticky"]["moved"]


def test_simulate_runs_only_the_named_strategies_when_strategies_given() -> None:
    document = simulate_json("--strategies", "sticky, modulo,sticky")

    assert tuple(document["strategies"]) == ("sticky", "modulo")


def test_simulate_adds_fan_out_when_fan_out_flag_given() -> None:
    document = simulate_json("--strategies", "sticky", "--fan-out")

    assert tuple(document["strategies"]) == ("sticky", "fan-out")


def test_simulate_gives_every_consumer_a_partition_when_fan_out_and_consumers_exceed_p() -> None:
    document = simulate_json(
        "--partitions", "4", "--consumers", "6", "--join", "2", "--strategies", "fan-out"
    )

    report = document["strategies"]["fan-out"]
    assert set(report["after"]) == {f"c{i}" for i in range(1, 9)}
    assert report["min_load"] >= 1
    assert sorted({p for parts in report["after"].values() for p in parts}) == [0, 1, 2, 3]


def test_simulate_accepts_partition_weights_when_weights_file_is_valid(tmp_path: Path) -> None:
    weights = tmp_path / "weights.json"
    weights.write_text(json.dumps({"0": 10.0, "1": 5, "7": 0}), encoding="utf-8")

    document = simulate_json("--partitions", "8", "--consumers", "2", "--weights", str(weights))

    after = document["strategies"]["weighted"]["after"]
    assert sorted(p for parts in after.values() for p in parts) == list(range(8))


# --- simulate: the table -----------------------------------------------------------------


def test_simulate_prints_a_table_and_the_fewest_moves_line_when_not_json() -> None:
    result = run("simulate", "--partitions", "24", "--consumers", "4", "--leave", "c2")

    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == "24 partitions, 4 consumers (c1..c4); c2 leaves -> 3 consumers"
    header = lines[1].split()
    assert header[:3] == ["strategy", "moved", "minimum"]
    rows = {line.split()[0]: line.split()[1:] for line in lines[2:] if line.split()}
    assert rows["sticky"][:4] == ["6", "6", "8", "8"]
    assert set(EXCLUSIVE) <= set(rows)
    assert "sticky (the default)" in lines[-1]
    assert "6 partitions moved (the minimum possible)" in lines[-1]


# --- simulate: bad input -----------------------------------------------------------------


def test_simulate_exits_2_listing_valid_names_when_strategy_unknown() -> None:
    result = run("simulate", "--strategies", "sticky,bogus")

    assert_usage_error(result, "bogus", "consistent-hash", "fan-out", "modulo", "sticky")


def test_simulate_exits_2_when_leaving_member_unknown() -> None:
    assert_usage_error(run("simulate", "--consumers", "3", "--leave", "c9"), "c9", "c1")


def test_simulate_exits_2_when_everyone_leaves() -> None:
    result = run("simulate", "--consumers", "2", "--leave", "c1", "--crash", "c2")

    assert_usage_error(result, "every consumer leaves")


def test_simulate_exits_2_when_member_named_twice() -> None:
    result = run("simulate", "--leave", "c1", "--crash", "c1")

    assert_usage_error(result, "c1", "more than once")


@pytest.mark.parametrize("partitions", ["0", "-1"])
def test_simulate_exits_2_when_partitions_below_one(partitions: str) -> None:
    assert_usage_error(run("simulate", "--partitions", partitions), "partitions")


@pytest.mark.parametrize(("option", "value"), [("--consumers", "0"), ("--join", "-1")])
def test_simulate_exits_2_when_member_counts_negative_or_empty(option: str, value: str) -> None:
    assert_usage_error(run("simulate", option, value), option)


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        ("{not json", "not JSON"),
        ("[1, 2]", "JSON object"),
        ('{"p1": 1.0}', "'p1'"),
        ('{"1": "heavy"}', "not a number"),
        ('{"1": true}', "not a number"),
        ('{"500": 1.0}', "500"),
        ('{"1": -2.0}', "-2.0"),
    ],
)
def test_simulate_exits_2_when_weights_file_is_bad(
    tmp_path: Path, content: str, fragment: str
) -> None:
    weights = tmp_path / "weights.json"
    weights.write_text(content, encoding="utf-8")

    assert_usage_error(run("simulate", "--weights", str(weights)), fragment)


def test_simulate_exits_2_when_weights_file_is_missing(tmp_path: Path) -> None:
    missing = tmp_path / "nope.json"

    assert_usage_error(run("simulate", "--weights", str(missing)), "nope.json")


# --- the command itself ------------------------------------------------------------------


def test_help_lists_the_commands_when_asked() -> None:
    result = run("--help")

    assert result.exit_code == 0
    assert "partition" in result.stdout
    assert "simulate" in result.stdout


def test_console_script_points_at_main_when_installed() -> None:
    (script,) = entry_points(group="console_scripts", name="shoal")

    assert script.load() is main


def test_main_runs_as_a_program_when_invoked_from_a_shell() -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "services.cli.main", "partition", "café", "-p", "10"],
        capture_output=True,
        text=True,
        encoding="utf-8",
        check=False,
    )

    assert completed.returncode == 0, completed.stderr
    assert completed.stdout == f"café\t{expected_partition('café', 10)}\n"


def test_simulate_shows_no_minimum_for_fan_out_when_partitions_have_several_owners() -> None:
    result = run("simulate", "-p", "4", "--consumers", "6", "--strategies", "sticky,fan-out")

    assert result.exit_code == 0, result.output
    rows = {line.split()[0]: line.split()[1:] for line in result.stdout.splitlines()[2:-1]}
    assert rows["fan-out"][1] == "n/a"
    assert rows["sticky"][1] != "n/a"
