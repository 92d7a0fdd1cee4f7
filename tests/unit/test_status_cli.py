"""``shoal status`` against a tiny HTTP server serving a canned status document, and the
"no stack running" case with a temporary state directory."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest
from typer.testing import CliRunner, Result

from services.cli._status import NO_STACK, status_url
from services.cli.main import app

PARTITIONS = 8

DOCUMENT: dict[str, Any] = {
    "leader": {"id": "leader-a", "term": 7},
    "served_by": {"id": "leader-b", "active": False},
    "backends": {"coordination": "redis", "transport": "kafka"},
    "generation": 3,
    "members": [
        {
            "id": "h1",
            "partitions": 4,
            "cpu": 12.5,
            "project_count": 9,
            "last_message_id": "m-41",
            "rate": 120.0,
        },
        {
            "id": "h2",
            "partitions": 4,
            "cpu": 95.0,
            "project_count": 3,
            "last_message_id": "",
            "rate": 30.5,
        },
    ],
    "partitions": [
        {
            "partition": p,
            "owner": "h1" if p < 4 else "h2",
            "generation": 3,
            "lag": p * 10 if p != 5 else None,
            "holder": ("h1" if p < 4 else "h2") if p != 6 else "h1",
        }
        for p in range(PARTITIONS)
    ],
    "rebalances": [],
}

# The same document with a rate per partition (a later status document may carry one).
RATED = {
    **DOCUMENT,
    "partitions": [{**p, "rate": 2.5 * p["partition"]} for p in DOCUMENT["partitions"]],
}


# The document a leader with backlog monitoring serves: oldest ages, group totals, ranking.
BACKLOG = {
    **DOCUMENT,
    "partitions": [
        {**p, "oldest_unacked_age_s": None if p["lag"] in (0, None) else 1.5 * p["partition"]}
        for p in DOCUMENT["partitions"]
    ],
    "group": {
        "name": "g1",
        "mode": "broadcast",
        "total_lag": 230,
        "unknown_lag": 1,
        "max_oldest_unacked_age_s": 10.5,
        "alert_age_s": 6.0,
        "alerting": [6, 7],
    },
    "top_projects": [{"project": "big", "messages": 1200}, {"project": "mid", "messages": 7}],
}


NOT_READ = "the status document was last read 20 s ago (last read: StoreUnavailableError: down)"


class _Handler(BaseHTTPRequestHandler):
    routes: ClassVar[dict[str, tuple[int, bytes]]] = {}
    # answered first, one per request, before the route's own answer (a leader starting)
    first: ClassVar[dict[str, list[tuple[int, bytes]]]] = {}
    delays: ClassVar[dict[str, float]] = {}

    def do_GET(self) -> None:
        time.sleep(self.delays.get(self.path, 0.0))
        queued = self.first.get(self.path)
        code, body = queued.pop(0) if queued else self.routes.get(self.path, (404, b"not found"))
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    """``http://127.0.0.1:PORT`` serving DOCUMENT at /status, 500 at /broken."""
    _Handler.routes = {
        "/status": (200, json.dumps(DOCUMENT).encode()),
        "/broken/status": (500, b"{}"),
        "/html/status": (200, b"<html>"),
        "/other/status": (200, b'{"hello": "world"}'),
        "/rated/status": (200, json.dumps(RATED).encode()),
        "/backlog/status": (200, json.dumps(BACKLOG).encode()),
        "/starting/status": (200, json.dumps(DOCUMENT).encode()),
        "/stale/status": (503, json.dumps({"error": NOT_READ}).encode()),
        "/slow/status": (200, json.dumps(DOCUMENT).encode()),
    }
    _Handler.first = {"/starting/status": [(503, json.dumps({"error": NOT_READ}).encode())] * 2}
    _Handler.delays = {"/slow/status": 1.5}
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


@pytest.fixture
def state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    directory = tmp_path / "state"
    directory.mkdir()
    monkeypatch.setenv("SHOAL_STATE_DIR", str(directory))
    return directory


def _unused_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def run(*args: str) -> Result:
    return CliRunner().invoke(app, ["status", *args])


def write_state(directory: Path, **fields: Any) -> None:
    (directory / "up.json").write_text(json.dumps(fields), encoding="utf-8")


# --- --json -----------------------------------------------------------------------------


def test_json_prints_one_object_with_leader_members_and_partitions(server: str) -> None:
    result = run("--json", "--url", server)
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert set(document) == {"leader", "members", "partitions", "group", "top_projects", "table"}
    assert (document["group"], document["top_projects"], document["table"]) == (None, [], None)
    assert document["leader"] == {"id": "leader-a", "term": 7}
    assert [m["id"] for m in document["members"]] == ["h1", "h2"]
    assert len(document["partitions"]) == PARTITIONS
    for entry in document["partitions"]:
        assert {"partition", "owner", "generation", "lag"} <= set(entry)
    assert document["partitions"][2] == {
        "partition": 2,
        "owner": "h1",
        "generation": 3,
        "lag": 20,
        "holder": "h1",
    }
    assert document["partitions"][5]["lag"] is None


@pytest.mark.parametrize("suffix", ["", "/", "/status", "/status/"])
def test_url_may_be_the_api_root_or_its_status_path(server: str, suffix: str) -> None:
    result = run("--json", "--url", server + suffix)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["leader"]["term"] == 7


def test_status_url_keeps_a_path_prefix() -> None:
    assert status_url("http://h:1/leader/") == "http://h:1/leader/status"
    assert status_url("https://h/status") == "https://h/status"


# --- tables -----------------------------------------------------------------------------


def test_tables_show_leader_term_members_and_every_partition(server: str) -> None:
    result = run("--url", server)
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "leader leader-a term 7" in out
    assert "served by leader-b (standby)" in out
    assert "backends: coordination=redis transport=kafka" in out.splitlines()
    assert "throughput 150.5 msg/s" in out
    assert "total lag" in out
    lines = out.splitlines()
    rows_of = [r for r in map(str.split, lines) if len(r) > 5]
    member_rows = {r[0]: r for r in rows_of if r[0] in {"h1", "h2"}}
    assert member_rows["h1"][1:5] == ["4", "12.5", "120.0", "9"]
    assert member_rows["h2"][1:5] == ["4", "95.0", "30.5", "3"]
    rows = [line.split() for line in lines if line.split()[:1] and line.split()[0].isdigit()]
    by_partition = {int(r[0]): r for r in rows if len(r) >= 5}
    assert set(by_partition) == set(range(PARTITIONS))
    assert by_partition[3][1:4] == ["h1", "3", "30"]
    assert by_partition[5][3] == "-"  # unknown lag
    assert "(handoff)" in " ".join(by_partition[6])  # holder h1 while h2 owns it


def test_a_rate_column_appears_when_partitions_have_a_rate(server: str) -> None:
    plain = run("--url", server)
    rated = run("--url", server + "/rated")
    assert plain.exit_code == rated.exit_code == 0, plain.output + rated.output
    assert "RATE/s" not in plain.stdout.split("\nPARTITIONS", 1)[1]
    rows = [line.split() for line in rated.stdout.split("\nPARTITIONS", 1)[1].splitlines()]
    assert "RATE/s" in rows[1]
    assert ["3", "h1", "3", "30", "7.5", "h1"] in rows


# --- discovery through the state file ---------------------------------------------------


def test_without_url_it_reads_the_state_file_and_skips_urls_that_do_not_answer(
    server: str, state_dir: Path
) -> None:
    write_state(
        state_dir,
        pid=os.getpid(),
        gateway="http://127.0.0.1:1",
        dashboard=server + "/",
        status_urls=[_unused_url(), server + "/status"],
        data_dir=str(state_dir),
        started_at="2026-11-22T00:00:00Z",
    )
    result = run("--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["leader"]["id"] == "leader-a"


def test_no_stack_when_the_state_file_is_missing(state_dir: Path) -> None:
    result = run()
    assert result.exit_code == 1
    assert result.stdout == ""
    assert NO_STACK in result.stderr
    assert "Traceback" not in result.stderr


def test_no_stack_when_the_stack_pid_is_dead(server: str, state_dir: Path) -> None:
    write_state(state_dir, pid=_dead_pid(), status_urls=[server])
    result = run("--json")
    assert result.exit_code == 1
    assert result.stdout == ""
    assert result.stderr.strip() == NO_STACK


def test_no_stack_when_the_state_file_is_not_json(state_dir: Path) -> None:
    (state_dir / "up.json").write_text("{not json", encoding="utf-8")
    result = run()
    assert result.exit_code == 1
    assert NO_STACK in result.stderr


def test_live_stack_whose_status_apis_do_not_answer_says_so(state_dir: Path) -> None:
    dead = _unused_url()
    write_state(state_dir, pid=os.getpid(), status_urls=[dead])
    result = run()
    assert result.exit_code == 1
    assert "cannot read the status API" in result.stderr
    assert dead in result.stderr


# --- failures of an explicit URL ---------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "why"),
    [("/broken", "HTTP 500"), ("/html", "not JSON"), ("/other", "not a shoal status document")],
)
def test_a_bad_answer_exits_1_with_the_reason(server: str, path: str, why: str) -> None:
    result = run("--url", server + path)
    assert result.exit_code == 1
    assert result.stdout == ""
    assert why in result.stderr


def test_an_unreachable_url_exits_1(state_dir: Path) -> None:
    result = run("--url", _unused_url(), "--timeout", "1")
    assert result.exit_code == 1
    assert "cannot read the status API" in result.stderr


def test_a_leader_not_ready_yet_is_asked_again_within_the_timeout(server: str) -> None:
    result = run("--json", "--url", server + "/starting", "--timeout", "5")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["leader"]["id"] == "leader-a"


def test_a_leader_that_stays_unavailable_says_why(server: str) -> None:
    # Long enough for the first 503 to arrive on a loaded machine: it keeps answering 503.
    result = run("--url", server + "/stale", "--timeout", "3")
    assert result.exit_code == 1
    assert f"HTTP 503: {NOT_READ}" in result.stderr


def test_a_leader_that_does_not_answer_in_time_is_named_with_the_timeout(server: str) -> None:
    result = run("--url", server + "/slow", "--timeout", "0.3")
    assert result.exit_code == 1
    assert f"{server}/slow/status: no answer within 0.3 s" in result.stderr


def test_a_non_http_url_exits_1() -> None:
    result = run("--url", "ftp://example")
    assert result.exit_code == 1
    assert "not an http(s) URL" in result.stderr


def test_json_carries_the_oldest_ages_the_group_totals_and_the_ranking(server: str) -> None:
    result = run("--json", "--url", server + "/backlog")
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["partitions"][2]["oldest_unacked_age_s"] == 3.0
    assert document["partitions"][0]["oldest_unacked_age_s"] is None
    assert document["group"] == BACKLOG["group"]
    assert document["top_projects"] == BACKLOG["top_projects"]


def test_tables_show_the_oldest_age_per_partition_the_group_and_the_ranking(
    server: str,
) -> None:
    plain = run("--url", server)
    result = run("--url", server + "/backlog")
    assert plain.exit_code == result.exit_code == 0, plain.output + result.output
    assert "OLDEST" not in plain.stdout and "TOP PROJECTS" not in plain.stdout
    out = result.stdout
    assert (
        "group g1 (broadcast) · lag 230 (1 partitions unknown) · oldest unacked 10.5 s"
        " · alert age 6.0 s · ALERTING partitions 6, 7"
    ) in out.splitlines()
    partitions, projects = out.split("\nPARTITIONS", 1)[1].split("\nTOP PROJECTS", 1)
    rows = [line.split() for line in partitions.splitlines()]
    assert "OLDEST" in rows[1]
    assert ["3", "h1", "3", "30", "4.5", "s", "h1"] in rows
    assert ["0", "h1", "3", "0", "-", "h1"] in rows  # nothing unacked
    assert [line.split() for line in projects.splitlines()][2:4] == [
        ["big", "1,200"],
        ["mid", "7"],
    ]
