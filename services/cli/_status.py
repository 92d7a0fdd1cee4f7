"""``shoal status``: who leads, which handler owns each partition, lag and rates, the
group's backlog, the busiest projects and the landing table (files, log, upkeep).

In the manner of ``kafka-consumer-groups --describe``: it reads the leader's ``GET /status``
document (any leader replica serves it, active or standby) and prints tables, or with
``--json`` one object ``{"leader", "members", "partitions", "group", "top_projects"}``.

Without ``--url`` it finds the stack that ``shoal up`` started from its state file,
``${SHOAL_STATE_DIR:-$HOME/.local/state/shoal}/up.json``::

    {"pid": 1234, "gateway": URL, "dashboard": URL, "status_urls": [URL, ...],
     "data_dir": DIR, "started_at": ...}

(a list of such objects is read too). A stack whose ``pid`` is dead is skipped; each status
URL of a live stack is tried in turn. A URL may be the status API's root or its
``/status`` path. Each is given ``--timeout`` seconds: a replica that answers 503 (it has
not read its document yet) is asked again within them; one that does not answer in time
is said to, by name, and the next URL is tried.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlsplit, urlunsplit

import httpx
import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

__all__ = [
    "NO_STACK",
    "StatusUnavailableError",
    "find_stacks",
    "json_view",
    "state_file",
    "status",
    "status_url",
]

NO_STACK = "no shoal stack is running (start one with `shoal up`)"
UNAVAILABLE = 1
STATE_FILE_NAME = "up.json"


class StatusUnavailableError(Exception):
    """No status document could be read; the message says where and why."""


@dataclass(frozen=True)
class Stack:
    """One entry of the state file."""

    pid: int | None
    status_urls: tuple[str, ...]
    dashboard: str | None
    transport_env: Mapping[str, str] = field(default_factory=dict)
    api_keys_file: str | None = None  # the keys file its gateway reads


def state_file() -> Path:
    """``${SHOAL_STATE_DIR:-$HOME/.local/state/shoal}/up.json``."""
    base = os.environ.get("SHOAL_STATE_DIR") or str(Path.home() / ".local" / "state" / "shoal")
    return Path(base) / STATE_FILE_NAME


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: it exists
        return True
    except OverflowError:
        return False
    return True


def _stack_of(entry: object) -> Stack | None:
    if not isinstance(entry, Mapping):
        return None
    pid = entry.get("pid")
    urls = entry.get("status_urls")
    dashboard = entry.get("dashboard")
    env = entry.get("transport_env")
    keys_file = entry.get("api_keys_file")
    return Stack(
        pid=pid if isinstance(pid, int) and not isinstance(pid, bool) and pid > 0 else None,
        status_urls=tuple(u for u in urls if isinstance(u, str) and u)
        if isinstance(urls, list)
        else (),
        dashboard=dashboard if isinstance(dashboard, str) else None,
        transport_env={k: v for k, v in env.items() if isinstance(k, str) and isinstance(v, str)}
        if isinstance(env, Mapping)
        else {},
        api_keys_file=keys_file if isinstance(keys_file, str) and keys_file else None,
    )


def find_stacks(path: Path) -> list[Stack]:
    """The live stacks the state file names (none when it is missing or unreadable)."""
    try:
        content: object = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    entries = content if isinstance(content, list) else [content]
    stacks = [s for s in map(_stack_of, entries) if s is not None]
    # A stack without a pid cannot be checked: try its URLs anyway.
    return [s for s in stacks if s.pid is None or pid_alive(s.pid)]


def status_url(url: str) -> str:
    """``http://h:p`` and ``http://h:p/`` -> ``http://h:p/status``; ``.../status`` as is."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise StatusUnavailableError(f"{url!r} is not an http(s) URL")
    path = parts.path.rstrip("/")
    if not path.endswith("/status"):
        path += "/status"
    return urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


_RETRY_PAUSE = 0.25  # seconds between two asks of a replica that answered 503


def fetch(url: str, timeout: float) -> dict[str, Any]:
    """GET the status document at ``url`` within ``timeout`` seconds, asking again while
    it answers 503 (a leader that has not read its document yet, or lost its stores);
    ``StatusUnavailableError`` says why not."""
    target = status_url(url)
    deadline = time.monotonic() + timeout
    while True:
        left = max(deadline - time.monotonic(), 0.001)
        try:
            response = httpx.get(target, timeout=httpx.Timeout(left, connect=min(left, 2.0)))
        except httpx.TimeoutException:
            raise StatusUnavailableError(
                f"{target}: no answer within {timeout:g} s (is the leader overloaded or "
                "stopped? --timeout waits longer)"
            ) from None
        except httpx.ConnectError as exc:
            raise StatusUnavailableError(f"{target}: cannot connect ({exc})") from None
        except httpx.HTTPError as exc:
            raise StatusUnavailableError(f"{target}: {type(exc).__name__}: {exc}") from None
        if response.status_code != 503 or time.monotonic() + _RETRY_PAUSE >= deadline:
            break
        time.sleep(_RETRY_PAUSE)
    if response.status_code != 200:
        raise StatusUnavailableError(f"{target}: HTTP {response.status_code}{_why(response)}")
    try:
        document = response.json()
    except ValueError:
        raise StatusUnavailableError(f"{target}: the answer is not JSON") from None
    if not (
        isinstance(document, dict)
        and isinstance(document.get("members"), list)
        and isinstance(document.get("partitions"), list)
    ):
        raise StatusUnavailableError(f"{target}: not a shoal status document")
    return document


def _why(response: httpx.Response) -> str:
    """``: <error>`` from a JSON error body (the leader's 503 says why), else nothing."""
    try:
        body = response.json()
    except ValueError:
        return ""
    error = body.get("error") if isinstance(body, dict) else None
    return f": {error}" if isinstance(error, str) and error else ""


def first_answer(urls: Iterable[str], timeout: float) -> tuple[str, dict[str, Any]]:
    """The first URL that serves a status document, and the document."""
    failures: list[str] = []
    for url in urls:
        try:
            return status_url(url), fetch(url, timeout)
        except StatusUnavailableError as exc:
            failures.append(str(exc))
    raise StatusUnavailableError("; ".join(failures) or "no status URL")


def json_view(document: Mapping[str, Any]) -> dict[str, Any]:
    """The documented shape: ``leader``, ``members``, ``partitions`` (each with
    ``partition``, ``owner``, ``generation``, ``lag``, ``oldest_unacked_age_s``; extra keys
    inside are kept), ``group`` (the backlog totals; null from a leader that predates them)
    ``top_projects`` (``[{"project", "messages"}]``, busiest first) and ``table`` (the
    landing table's upkeep: null from a leader that keeps none)."""
    return {
        "leader": document.get("leader"),
        "members": list(document.get("members") or []),
        "partitions": list(document.get("partitions") or []),
        "group": document.get("group"),
        "top_projects": list(document.get("top_projects") or []),
        "table": document.get("table"),
    }


# --- tables ------------------------------------------------------------------------------


def _number(value: object, digits: int = 1) -> str:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return "-"
    return f"{value:,.{digits}f}" if isinstance(value, float) else f"{value:,}"


def _age(value: object) -> str:
    number = _number(value)
    return number if number == "-" else f"{number} s"


def _owner(value: object) -> str:
    if value is None or value in ("", []):
        return "-"
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    return str(value)


def _leader_line(document: Mapping[str, Any], url: str) -> Text:
    # Ids come from the document: Text, never markup.
    line = Text()
    leader = document.get("leader")
    if isinstance(leader, Mapping) and leader.get("id"):
        line.append("leader ").append(str(leader["id"]), style="bold")
        line.append(f" term {leader.get('term', '?')}")
    else:
        line.append("no leader elected", style="yellow")
    line.append(f" · generation {document.get('generation', '?')}")
    served = document.get("served_by")
    if isinstance(served, Mapping) and served.get("id"):
        role = "active" if served.get("active") else "standby"
        line.append(f" · served by {served['id']} ({role})")
    return line.append(f" · {url}")


def members_table(members: Sequence[Mapping[str, Any]]) -> Table:
    table = Table(title="HANDLERS", title_justify="left", box=None, header_style="bold")
    table.add_column("HANDLER")
    for name in ("PARTITIONS", "CPU %", "RATE/s", "PROJECTS"):
        table.add_column(name, justify="right")
    table.add_column("LAST MESSAGE")
    for member in members:
        table.add_row(
            Text(str(member.get("id", "?"))),
            _number(member.get("partitions")),
            _number(member.get("cpu")),
            _number(member.get("rate")),
            _number(member.get("project_count")),
            Text(str(member.get("last_message_id") or "-")),
        )
    return table


def partitions_table(partitions: Sequence[Mapping[str, Any]]) -> Table:
    """One row per partition; an OLDEST column (the oldest unacked message's age) when
    the document has one, a RATE column when it gives partitions a rate (today it gives
    rates per handler only: see the HANDLERS table)."""
    with_age = any("oldest_unacked_age_s" in p for p in partitions)
    with_rate = any(isinstance(p.get("rate"), int | float) for p in partitions)
    table = Table(title="PARTITIONS", title_justify="left", box=None, header_style="bold")
    table.add_column("PARTITION", justify="right")
    table.add_column("OWNER")
    table.add_column("GENERATION", justify="right")
    table.add_column("LAG", justify="right")
    if with_age:
        table.add_column("OLDEST", justify="right")
    if with_rate:
        table.add_column("RATE/s", justify="right")
    table.add_column("HOLDER")
    for entry in partitions:
        owner, holder = _owner(entry.get("owner")), _owner(entry.get("holder"))
        moving = holder not in (owner, "-")
        cells: list[str | Text] = [
            _number(entry.get("partition")),
            Text(owner),
            _number(entry.get("generation")),
            _number(entry.get("lag")),
        ]
        if with_age:
            cells.append(_age(entry.get("oldest_unacked_age_s")))
        if with_rate:
            cells.append(_number(entry.get("rate")))
        cells.append(Text(f"{holder} (handoff)", style="yellow") if moving else Text(holder))
        table.add_row(*cells)
    return table


def _totals(document: Mapping[str, Any]) -> str:
    members = [m for m in document.get("members") or [] if isinstance(m, Mapping)]
    partitions = [p for p in document.get("partitions") or [] if isinstance(p, Mapping)]
    rate = sum(float(m["rate"]) for m in members if isinstance(m.get("rate"), int | float))
    lags = [int(p["lag"]) for p in partitions if isinstance(p.get("lag"), int)]
    unowned = sum(1 for p in partitions if _owner(p.get("owner")) == "-")
    lag = f"{sum(lags):,}" if lags else "unknown"
    return (
        f"{len(members)} handlers · {len(partitions)} partitions ({unowned} without owner)"
        f" · throughput {rate:,.1f} msg/s · total lag {lag}"
    )


def _group_line(document: Mapping[str, Any]) -> Text | None:
    group = document.get("group")
    if not isinstance(group, Mapping):
        return None  # a leader from before the document had group totals
    lag = group.get("total_lag")
    unknown = group.get("unknown_lag")
    line = Text(f"group {group.get('name', '?')}")
    if group.get("mode"):  # a leader from before the document named the mode has none
        line.append(f" ({group['mode']})")
    line.append(f" · lag {_number(lag)}")
    if isinstance(unknown, int) and unknown:
        line.append(f" ({unknown} partitions unknown)")
    line.append(f" · oldest unacked {_age(group.get('max_oldest_unacked_age_s'))}")
    line.append(f" · alert age {_age(group.get('alert_age_s'))}")
    alerting = group.get("alerting")
    if isinstance(alerting, list) and alerting:
        listed = ", ".join(str(p) for p in alerting)
        line.append(f" · ALERTING partitions {listed}", style="bold red")
    return line


def projects_table(projects: Sequence[Mapping[str, Any]]) -> Table:
    table = Table(title="TOP PROJECTS", title_justify="left", box=None, header_style="bold")
    table.add_column("PROJECT")
    table.add_column("MESSAGES", justify="right")
    for entry in projects:
        table.add_row(Text(str(entry.get("project", "?"))), _number(entry.get("messages")))
    return table


def _scaling_line(document: Mapping[str, Any]) -> str | None:
    scaling = document.get("scaling")
    decisions: object = None
    if isinstance(scaling, list):
        decisions = scaling
    elif isinstance(scaling, Mapping):
        decisions = scaling.get("decisions") or scaling.get("history")
        if not decisions and isinstance(scaling.get("last"), Mapping):
            decisions = [scaling["last"]]
    if not isinstance(decisions, list) or not decisions or not isinstance(decisions[0], Mapping):
        return None
    last = decisions[0]
    return f"last scaling decision: {last.get('reason') or last.get('rule') or last}"


def _size(value: object) -> str:
    if isinstance(value, bool) or not isinstance(value, int):
        return "-"
    size, unit = float(value), "B"
    for bigger in ("KiB", "MiB", "GiB", "TiB"):
        if size < 1024:
            break
        size, unit = size / 1024, bigger
    return f"{value:,} B" if unit == "B" else f"{size:,.1f} {unit}"


def _moment(epoch: object) -> str:
    """``HH:MM:SS UTC (N s/min/h ago)``; ``-`` when not a time."""
    if isinstance(epoch, bool) or not isinstance(epoch, int | float):
        return "-"
    ago = max(0, round(time.time() - epoch))
    since = f"{ago} s" if ago < 90 else f"{ago // 60} min" if ago < 5400 else f"{ago // 3600} h"
    return f"{time.strftime('%H:%M:%S', time.gmtime(epoch))} UTC ({since} ago)"


def _table_line(document: Mapping[str, Any]) -> Text | None:
    """The landing table: its files, rows and log as the leader last read them, its last
    compaction and vacuum, and the upkeep's error while its rounds fail."""
    table = document.get("table")
    if not isinstance(table, Mapping):
        return None  # a leader from before the document had the table
    if not table.get("enabled"):
        return Text(
            "table: not kept up by this leader (no SHOAL_LEADER_DATA_DIR, or broadcast mode)"
        )
    line = Text("table")
    if isinstance(table.get("files"), int):
        line.append(f" · {_number(table['files'])} files")
        small = table.get("small_files")
        if isinstance(small, int) and small:
            line.append(f" ({small:,} small)")
        line.append(f" · {_size(table.get('bytes'))} · {_number(table.get('rows'))} rows")
        line.append(
            f" · log {_number(table.get('log_files'))} files, {_size(table.get('log_bytes'))}"
        )
    else:
        line.append(" · not read yet")
    compaction = table.get("last_compaction")
    if isinstance(compaction, Mapping):
        line.append(
            f" · last compaction {_moment(compaction.get('at'))}: "
            f"{_number(compaction.get('files_removed'))} -> "
            f"{_number(compaction.get('files_added'))} files"
        )
    else:
        line.append(" · no compaction yet")
    vacuum = table.get("last_vacuum")
    if isinstance(vacuum, Mapping):
        line.append(
            f" · last vacuum {_moment(vacuum.get('at'))}: "
            f"{_number(vacuum.get('files_removed'))} files deleted"
        )
    error = table.get("last_error")
    if isinstance(error, Mapping):
        line.append(f" · UPKEEP FAILING: {error.get('error', '?')}", style="bold red")
    return line


def _backends_line(document: Mapping[str, Any]) -> str | None:
    backends = document.get("backends")
    if not isinstance(backends, Mapping) or not backends.get("coordination"):
        return None  # a leader from before the document named its backends
    return (
        f"backends: coordination={backends['coordination']} "
        f"transport={backends.get('transport', '?')}"
    )


def print_status(console: Console, document: Mapping[str, Any], url: str) -> None:
    members = [m for m in document.get("members") or [] if isinstance(m, Mapping)]
    partitions = [p for p in document.get("partitions") or [] if isinstance(p, Mapping)]
    console.print(_leader_line(document, url), soft_wrap=True)
    backends = _backends_line(document)
    if backends:
        console.print(backends, markup=False, soft_wrap=True)
    console.print(_totals(document), markup=False, soft_wrap=True)
    group = _group_line(document)
    if group:
        console.print(group, soft_wrap=True)
    scaling = _scaling_line(document)
    if scaling:
        console.print(scaling, markup=False, soft_wrap=True)
    table = _table_line(document)
    if table:
        console.print(table, soft_wrap=True)
    console.print()
    console.print(members_table(members))
    console.print()
    console.print(partitions_table(partitions))
    projects = [p for p in document.get("top_projects") or [] if isinstance(p, Mapping)]
    if projects:
        console.print()
        console.print(projects_table(projects))


# --- the command ---------------------------------------------------------------------------


def status(
    *,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            help="print one JSON object: leader, members, partitions, group, top_projects",
        ),
    ] = False,
    url: Annotated[
        str | None,
        typer.Option(
            "--url",
            help="a leader's status API (http://HOST:PORT or .../status); default: the stack "
            "`shoal up` started (its state file under $SHOAL_STATE_DIR)",
            show_default=False,
        ),
    ] = None,
    timeout: Annotated[
        float,
        typer.Option(
            min=0.1, help="seconds to wait for each status API (one not ready yet is asked again)"
        ),
    ] = 5.0,
) -> None:
    """Leader and term, handlers with their stats, owner/generation/lag/oldest unacked age
    per partition, the group's backlog totals, the busiest projects and the landing
    table's files, log and upkeep."""
    try:
        if url is not None:
            answered, document = first_answer([url], timeout)
        else:
            stacks = find_stacks(state_file())
            if not stacks:
                typer.echo(NO_STACK, err=True)
                raise typer.Exit(UNAVAILABLE)
            urls = [u for stack in stacks for u in stack.status_urls]
            if not urls:
                typer.echo(f"error: {state_file()} names no status URL", err=True)
                raise typer.Exit(UNAVAILABLE)
            answered, document = first_answer(dict.fromkeys(urls), timeout)
    except StatusUnavailableError as exc:
        typer.echo(f"error: cannot read the status API: {exc}", err=True)
        raise typer.Exit(UNAVAILABLE) from None
    if as_json:
        typer.echo(json.dumps(json_view(document)))
        return
    print_status(Console(highlight=False), document, answered)
