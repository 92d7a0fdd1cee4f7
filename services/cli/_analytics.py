"""``shoal analytics``: Spark jobs over landed data (audit, report, weights), and the
landing table's upkeep (compact, vacuum: no Spark).

The landing zone is a Delta Lake table: audit, report and weights check it is one (with
delta-rs, before Spark starts), then Spark reads it through Delta at its newest version,
never a glob of the folder. A zone without a ``_delta_log`` is refused, Parquet files in
it or not.

pyspark loads only when a command runs (``adapters.spark`` imports it lazily), so the other
``shoal`` commands start without it. Exit codes: 0 fine; 1 the audit found a loss, nothing
landed to measure, compaction left the table fewer rows than it found or active files
storage does not hold, or check found such files; 2 usage (bad option, missing directory,
no log, an unreadable log or disk; compact, vacuum, check and repair: no Delta table there,
or the storage failed; repair: a version that cannot be undone); 3 Spark failed. Progress
(the current step, and tasks done over the active Spark stages) goes to stderr.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal, NoReturn

import anyio
import typer
from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from adapters.s3 import S3Location, S3Settings
from adapters.spark import (
    DEFAULT_SETTLE_SECONDS,
    AnalyticsError,
    AuditResult,
    LandingDirError,
    NoDataError,
    PartitionWeights,
    check_local_zone,
    load_skew,
    not_a_table,
    render_report_html,
)
from core.assignment import AssignmentOptions, AssignmentRequest, strategy_named
from core.messages import MessageKind
from core.partitioning import DEFAULT_PARTITIONS
from core.table import vacuum_retention_problem
from services.cli._compact import (
    ZoneError,
    check_table,
    compact_table,
    compaction_json,
    print_check,
    print_compaction,
    print_repair,
    print_vacuum,
    repair_table,
    table_settings,
    vacuum_json,
    vacuum_table,
)
from services.cli._dlq import stored_letters
from services.common.settings import HandlerSettings, load_settings
from services.common.table import landed_table
from services.common.table_address import is_object_store, table_address

if TYPE_CHECKING:
    from adapters.spark import SparkAnalytics, SparkSettings

__all__ = [
    "EXIT_LOST",
    "EXIT_SPARK",
    "EXIT_USAGE",
    "analytics_app",
    "parse_time",
]

EXIT_LOST = 1
EXIT_USAGE = 2
EXIT_SPARK = 3

analytics_app = typer.Typer(
    name="analytics",
    help="Spark jobs over landed Parquet data (audit, report, weights); the table's upkeep "
    "(compact, vacuum, check, repair).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

DataDir = Annotated[
    str,
    typer.Argument(
        help="the landing zone: a directory or s3://bucket/prefix holding a Delta table "
        "(_delta_log, date=YYYY-MM-DD/*.parquet)",
        show_default=False,
    ),
]
Master = Annotated[
    str | None,
    typer.Option(
        help="Spark master: local[*] (default, or SHOAL_SPARK_MASTER) or a cluster URL "
        "such as spark://host:7077",
        show_default=False,
    ),
]
Partitions = Annotated[int, typer.Option("--partitions", "-p", help="partitions P", min=1)]
Quiet = Annotated[bool, typer.Option("--quiet", "-q", help="no progress on stderr")]


def _fail(message: str, code: int) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def parse_time(text: str) -> datetime:
    """``now``, seconds since the epoch, or ISO 8601 (no zone means UTC)."""
    if text.strip().lower() == "now":
        return datetime.now(UTC)
    try:
        return datetime.fromtimestamp(float(text), UTC)
    except ValueError:
        pass
    try:
        moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise typer.BadParameter(
            f"{text!r} is not a time: use ISO 8601 (2026-11-22T10:00:00Z), "
            f"seconds since the epoch, or now"
        ) from None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def _zone(text: str) -> str | Path:
    """The landing zone as given: ``s3://bucket/prefix`` (checked) or a directory."""
    if is_object_store(text):
        try:
            S3Location.parse(text)
        except ValueError as exc:
            _fail(str(exc), EXIT_USAGE)
        return text
    return Path(text)


def _table_uri(zone: str | Path) -> str:
    """The URI of the landing zone's Delta table (``table_address``); exit 2 when the
    directory is missing, holds no Delta table, or the table's log cannot be read."""
    s3 = S3Settings() if is_object_store(zone) else None
    try:
        if isinstance(zone, Path):
            check_local_zone(zone)
        table = landed_table(zone, s3)
    except LandingDirError as exc:
        _fail(str(exc), EXIT_USAGE)
    except (OSError, ValueError) as exc:
        reason = str(exc).partition("\n")[0]  # delta-rs appends a native backtrace
        _fail(f"cannot read the landing table at {zone}: {reason}", EXIT_USAGE)
    if table is None:
        _fail(not_a_table(zone, holds_parquet=False), EXIT_USAGE)
    return table_address(zone, s3).uri


def _settings(master: str | None, zone: str | Path) -> SparkSettings:
    from adapters.spark import SparkSettings  # noqa: PLC0415 (pydantic only when run)

    settings = SparkSettings()
    if master is not None:
        settings = settings.model_copy(update={"master": master})
    if is_object_store(zone):
        from adapters.spark import S3aSettings, s3a_conf  # noqa: PLC0415 (pyspark)

        s3 = S3Settings()
        secret = s3.secret_access_key
        try:
            conf = s3a_conf(
                S3aSettings(
                    endpoint_url=s3.endpoint_url,
                    region=s3.region,
                    access_key_id=s3.access_key_id,
                    secret_access_key=secret.get_secret_value() if secret else None,
                    path_style=s3.addressing_style != "virtual",
                )
            )
        except OSError as exc:
            _fail(f"cannot fetch Hadoop's s3a connector for {zone}: {exc}", EXIT_SPARK)
        settings = settings.model_copy(update={"extra_conf": {**conf, **settings.extra_conf}})
    return settings


class _Progress:
    """The current step and Spark's task counts, on stderr, while a job runs."""

    def __init__(self, enabled: bool) -> None:
        self._enabled = enabled
        self._progress = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            TextColumn("[dim]{task.fields[tasks]}"),
            TimeElapsedColumn(),
            console=Console(stderr=True),
            transient=True,
            disable=not enabled,
        )
        self._task = self._progress.add_task("starting", tasks="")
        self._analytics: SparkAnalytics | None = None
        self._stop = threading.Event()
        self._poller = threading.Thread(target=self._poll, name="spark-progress", daemon=True)

    def step(self, description: str) -> None:
        self._progress.update(self._task, description=description, tasks="")

    def watch(self, analytics: SparkAnalytics) -> None:
        self._analytics = analytics

    def _poll(self) -> None:
        while not self._stop.wait(0.25):
            if self._analytics is None:
                continue
            snapshot = self._analytics.progress()
            tasks = (
                f"{snapshot.tasks_done}/{snapshot.tasks_total} tasks"
                f" in {snapshot.active_stages} stage{'s' if snapshot.active_stages != 1 else ''}"
                if snapshot.active_stages
                else ""
            )
            self._progress.update(self._task, tasks=tasks)

    @contextmanager
    def running(self) -> Iterator[_Progress]:
        with self._progress:
            if self._enabled:
                self._poller.start()
            try:
                yield self
            finally:
                self._stop.set()
                if self._poller.is_alive():
                    self._poller.join(timeout=2)


@contextmanager
def _analytics(master: str | None, quiet: bool, zone: str | Path) -> Iterator[SparkAnalytics]:
    """A started ``SparkAnalytics`` with progress; maps failures to exit codes."""
    try:
        from adapters.spark import SparkAnalytics  # noqa: PLC0415 (pyspark only when run)
    except ImportError as exc:
        _fail(f"Spark is not installed ({exc}); install shoal with the spark extra", EXIT_SPARK)
    progress = _Progress(enabled=not quiet)
    try:
        with (
            progress.running(),
            SparkAnalytics(_settings(master, zone), on_step=progress.step) as analytics,
        ):
            progress.watch(analytics)
            started = time.perf_counter()
            yield analytics
            progress.step(f"done in {time.perf_counter() - started:.1f} s")
    except LandingDirError as exc:
        _fail(str(exc), EXIT_USAGE)
    except NoDataError as exc:
        _fail(str(exc), EXIT_LOST)
    except AnalyticsError as exc:  # SparkStartError, SparkJobError
        _fail(str(exc), EXIT_SPARK)


# --- audit ------------------------------------------------------------------------------


@analytics_app.command()
def audit(
    data_dir: DataDir,
    *,
    as_of: Annotated[
        str | None,
        typer.Option(
            help="count sequences accepted at or before AS_OF minus --settle "
            "(ISO 8601, epoch seconds, or now; default: now)",
            show_default=False,
        ),
    ] = None,
    drain_marker: Annotated[
        bool,
        typer.Option(
            "--drain-marker",
            help="the pipeline was drained (load stopped, backlog 0): every accepted "
            "sequence counts, nothing is in flight",
        ),
    ] = False,
    settle: Annotated[
        float,
        typer.Option(help="seconds a message may take to land (with --as-of)", min=0),
    ] = DEFAULT_SETTLE_SECONDS,
    ledger: Annotated[
        Path | None,
        typer.Option(
            help="the gateway's accepted-ranges ledger, *.jsonl "
            "(default: DATA_DIR/_ledger when it exists)",
            show_default=False,
        ),
    ] = None,
    no_ledger: Annotated[
        bool, typer.Option("--no-ledger", help="ignore any ledger: infer from sequences")
    ] = False,
    dead_letters: Annotated[
        bool,
        typer.Option(
            "--dead-letters",
            help="read the transport's dead letters (as `shoal dlq list` does) and count an "
            "accepted message among them as dead-lettered, not lost",
        ),
    ] = False,
    worst: Annotated[int, typer.Option(help="series to list, worst first", min=0)] = 10,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
    master: Master = None,
    quiet: Quiet = False,
) -> None:
    """Accepted vs landed per (gateway, project): lost, dead-lettered, duplicated, nines.
    Exit 1 on loss."""
    if drain_marker and as_of is not None:
        _fail("--drain-marker and --as-of exclude each other", EXIT_USAGE)
    moment = parse_time(as_of) if as_of is not None else None
    zone = _zone(data_dir)
    table = _table_uri(zone)
    ledger_dir = None if no_ledger else ledger
    if (
        ledger_dir is None
        and not no_ledger
        and isinstance(zone, Path)
        and (zone / "_ledger").is_dir()
    ):
        ledger_dir = zone / "_ledger"
    dead = (
        [
            (e.gateway_id, e.project_id, e.sequence, e.received_at)
            for e in (stored.letter.envelope for stored in stored_letters())
            if e.kind is MessageKind.DATA and e.sequence >= 1
        ]
        if dead_letters
        else []
    )
    with _analytics(master, quiet or as_json, zone) as analytics:
        result = analytics.audit(
            table,
            as_of=moment,
            settle_seconds=settle,
            drained=drain_marker,
            ledger_dir=ledger_dir,
            dead_letters=dead,
            worst=worst,
        )
    if as_json:
        typer.echo(json.dumps(result.to_json()))
    else:
        _print_audit(result)
    if not result.ok:
        raise typer.Exit(EXIT_LOST)


def _print_audit(result: AuditResult) -> None:
    console = Console(highlight=False, soft_wrap=True)
    if result.mode == "drained":
        due = "drained: every accepted sequence is due"
    else:
        assert result.cutoff is not None and result.as_of is not None
        due = (
            f"due = accepted at or before {_iso(result.cutoff)} "
            f"(as-of {_iso(result.as_of)} minus {result.settle_seconds:g} s settle)"
        )
    source = "the gateway ledger" if result.accepted_from == "ledger" else "sequence numbers"
    console.print(f"audit of {result.data_dir}", style="bold", markup=False)
    console.print(f"{due}; accepted from {source}", markup=False)
    table = Table(show_edge=False, box=None, pad_edge=False)
    table.add_column("", style="bold")
    table.add_column("count", justify="right")
    table.add_column("per million accepted", justify="right")
    table.add_row("accepted", f"{result.accepted:,}", "")
    table.add_row("landed", f"{result.landed:,}", _ppm(result.landed, result.accepted))
    table.add_row("lost", f"{result.lost:,}", f"{result.lost_per_million:,.1f}")
    if result.dead_lettered:
        table.add_row(
            "dead-lettered",
            f"{result.dead_lettered:,}",
            _ppm(result.dead_lettered, result.accepted),
        )
    table.add_row("duplicated", f"{result.duplicated:,}", f"{result.duplicated_per_million:,.1f}")
    console.print(table)
    console.print(f"delivery: {result.nines}", markup=False)
    extra = [
        f"series {result.series:,}",
        f"announcements excluded {result.announcements:,}",
        f"landed after the cutoff (not counted) {result.after_cutoff:,}",
    ]
    if result.in_flight is not None:
        extra.append(f"in flight {result.in_flight:,}")
    if result.refused is not None:
        extra.append(f"refused (503, never accepted) {result.refused:,}")
    if result.unacknowledged is not None:
        extra.append(f"landed without a 202 {result.unacknowledged:,}")
    if result.conflicting:
        extra.append(f"sequences with two message ids {result.conflicting:,}")
    console.print("; ".join(extra), markup=False)
    if result.worst:
        worst = Table(title="series with loss or duplicates (worst first)", title_justify="left")
        for name in ("gateway", "project", "accepted", "landed", "lost", "duplicated"):
            worst.add_column(name, justify="left" if name in {"gateway", "project"} else "right")
        for s in result.worst:
            worst.add_row(
                s.gateway_id,
                s.project_id,
                f"{s.accepted:,}",
                f"{s.landed:,}",
                f"{s.lost:,}",
                f"{s.duplicated:,}",
            )
        console.print(worst)
    if result.lost_ranges:
        shown = ", ".join(
            f"{r.gateway_id}/{r.project_id} "
            + (f"{r.first}" if r.first == r.last else f"{r.first}..{r.last}")
            for r in result.lost_ranges[:20]
        )
        more = len(result.lost_ranges) - 20
        console.print(
            f"lost sequences: {shown}" + (f" (+{more} more ranges)" if more > 0 else ""),
            markup=False,
        )
    for limit in result.limits:
        console.print(f"limit: {limit}", style="dim", markup=False)
    if result.ok:
        console.print("OK: nothing accepted was lost", style="green")
    else:
        console.print(f"LOST: {result.lost:,} accepted messages never landed", style="bold red")


def _ppm(count: int, of: int) -> str:
    return f"{count * 1_000_000 / of:,.1f}" if of else ""


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


# --- report -----------------------------------------------------------------------------


@analytics_app.command()
def report(
    data_dir: DataDir,
    *,
    out: Annotated[Path, typer.Option(help="directory for report.json and report.html")],
    partitions: Partitions = DEFAULT_PARTITIONS,
    bucket: Annotated[
        int | None,
        typer.Option(
            help="seconds per time bucket (default: a round size, <= 120 buckets)",
            min=1,
            show_default=False,
        ),
    ] = None,
    window: Annotated[
        float, typer.Option(help="seconds before/after each rebalance to compare", min=0.001)
    ] = 30.0,
    top: Annotated[int, typer.Option(help="projects in the volume ranking", min=1)] = 30,
    master: Master = None,
    quiet: Quiet = False,
) -> None:
    """Volume, skew, handler load over time, latency, rebalances: report.json + report.html."""
    zone = _zone(data_dir)
    table = _table_uri(zone)
    with _analytics(master, quiet, zone) as analytics:
        document = analytics.report(
            table,
            partitions=partitions,
            bucket_seconds=bucket,
            window_seconds=window,
            top_projects=top,
        )
    try:
        out.mkdir(parents=True, exist_ok=True)
        (out / "report.json").write_text(json.dumps(document, indent=2) + "\n", "utf-8")
        (out / "report.html").write_text(render_report_html(document), "utf-8")
    except OSError as exc:
        _fail(f"cannot write the report to {out}: {exc.strerror}", EXIT_USAGE)
    s = document["summary"]
    latency = document["latency_ms"]
    skew = document["partitions_load"]
    console = Console(highlight=False, soft_wrap=True)
    console.print(
        f"{s['rows']:,} rows, {s['projects']:,} projects, {s['handlers']} handlers, "
        f"{s['generations']} generations",
        markup=False,
    )
    console.print(
        f"partition skew max/mean {skew['skew_rows']:.2f} (partition {skew['max_partition']}); "
        f"handler skew {document['handlers']['skew_rows']:.2f}",
        markup=False,
    )
    console.print(
        f"latency ms p50 {latency['p50']:.1f}  p95 {latency['p95']:.1f}  "
        f"p99 {latency['p99']:.1f}  max {latency['max']:.1f}",
        markup=False,
    )
    console.print(f"wrote {out / 'report.json'} and {out / 'report.html'}", markup=False)


# --- weights ----------------------------------------------------------------------------


@analytics_app.command()
def weights(
    data_dir: DataDir,
    *,
    out: Annotated[Path, typer.Option(help="the weights file to write (JSON)")],
    partitions: Partitions = DEFAULT_PARTITIONS,
    metric: Annotated[
        str, typer.Option(help="load measure: rows or bytes (payload bytes)")
    ] = "rows",
    floor: Annotated[
        float, typer.Option(help="smallest weight (relative to the mean load 1.0)", min=0)
    ] = 0.05,
    since: Annotated[
        str | None,
        typer.Option(help="measure rows received from this time on", show_default=False),
    ] = None,
    members: Annotated[
        int,
        typer.Option(help="also compare weighted vs sticky max/mean load for N members", min=0),
    ] = 0,
    master: Master = None,
    quiet: Quiet = False,
) -> None:
    """Partition weights from measured load, for the leader's weighted strategy."""
    if metric not in {"rows", "bytes"}:
        _fail(f"--metric must be rows or bytes, not {metric!r}", EXIT_USAGE)
    chosen: Literal["rows", "bytes"] = "rows" if metric == "rows" else "bytes"
    start = parse_time(since) if since is not None else None
    zone = _zone(data_dir)
    table = _table_uri(zone)
    with _analytics(master, quiet, zone) as analytics:
        measured = analytics.weights(
            table, partitions=partitions, metric=chosen, floor=floor, since=start
        )
    try:
        measured.write(out)
    except OSError as exc:
        _fail(f"cannot write {out}: {exc.strerror}", EXIT_USAGE)
    console = Console(highlight=False, soft_wrap=True)
    heaviest = sorted(measured.weights.items(), key=lambda kv: (-kv[1], kv[0]))[:5]
    console.print(
        f"{measured.measured_from['rows']:,} rows over {partitions} partitions; heaviest: "
        + ", ".join(f"p{p}={w:.2f}" for p, w in heaviest),
        markup=False,
    )
    if members:
        sticky, weighted = compare_strategies(measured, members)
        console.print(
            f"{members} members: max/mean {measured.metric} per member "
            f"sticky {sticky:.3f} -> weighted {weighted:.3f}",
            markup=False,
        )
    console.print(f"wrote {out}", markup=False)


def compare_strategies(measured: PartitionWeights, members: int) -> tuple[float, float]:
    """max/mean measured load per member: ``sticky`` (no weights) vs ``weighted``."""
    ids = [f"m{i}" for i in range(1, members + 1)]
    plain = strategy_named("sticky").assign(AssignmentRequest.of(measured.partitions, ids))
    balanced = strategy_named("weighted").assign(
        AssignmentRequest.of(
            measured.partitions,
            ids,
            options=AssignmentOptions(partition_weights=dict(measured.weights)),
        )
    )
    loads = {p: float(v) for p, v in measured.loads.items()}
    owned = [result.assignment.by_member() for result in (plain, balanced)]
    return (
        load_skew({m: owned[0].get(m, ()) for m in ids}, loads),
        load_skew({m: owned[1].get(m, ()) for m in ids}, loads),
    )


# --- compact ----------------------------------------------------------------------------


@analytics_app.command("compact")
def compact_command(
    data_dir: DataDir,
    *,
    include_today: Annotated[
        bool,
        typer.Option(
            "--include-today",
            help="also compact today's UTC date (handlers still write there; their commits "
            "and the rewrite do not conflict)",
        ),
    ] = False,
    target_bytes: Annotated[
        int | None,
        typer.Option(
            help="compaction writes files of about this many bytes [default: "
            "SHOAL_TABLE_TARGET_FILE_BYTES, 128 MiB]",
            min=1024,
            show_default=False,
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
) -> None:
    """Merge the small files (below SHOAL_TABLE_SMALL_FILE_BYTES) of every closed day (before
    today, UTC) that holds two or more into files of about --target-bytes, in one commit;
    then checkpoint the table, which cleans its log. The files merged away stay for readers
    of older versions until `shoal analytics vacuum`. Exit 1 when the table holds fewer
    rows after than before; 2 when the zone is missing, holds no Delta table, or the
    storage fails."""
    settings = table_settings(target_file_bytes=target_bytes)
    try:
        result = anyio.run(partial(compact_table, data_dir, settings, include_today=include_today))
    except ZoneError as exc:
        _fail(str(exc), EXIT_USAGE)
    except OSError as exc:
        _fail(f"compaction of {data_dir} stopped: {exc}", EXIT_USAGE)
    if as_json:
        typer.echo(json.dumps(compaction_json(result)))
    else:
        print_compaction(Console(highlight=False, soft_wrap=True), result)
    if result.compaction.rows_lost:
        raise typer.Exit(EXIT_LOST)


@analytics_app.command("vacuum")
def vacuum_command(
    data_dir: DataDir,
    *,
    retention_hours: Annotated[
        float | None,
        typer.Option(
            help="delete only files older than this: above the table's log retention "
            "(SHOAL_TABLE_LOG_RETENTION_HOURS when it was made) and a handler's write "
            "[default: SHOAL_TABLE_VACUUM_RETENTION_HOURS, 36]",
            min=0,
            show_default=False,
        ),
    ] = None,
    allow_short_retention: Annotated[
        bool,
        typer.Option(
            "--allow-short-retention",
            help="take a retention at or below the log retention or a handler's write: only "
            "with no handler writing (files between their write and their commit are "
            "deleted, and a paused writer could commit files that are gone)",
        ),
    ] = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="list the files, delete nothing")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
) -> None:
    """Delete the files of the table's folder that no table version names (merged away by
    compaction, or written by a handler whose commit never came) once older than
    --retention-hours. Exit 2 when the zone is missing, holds no Delta table, holds another
    table inside its folder, the retention is too short, or the storage fails."""
    checked = not allow_short_retention
    settings = table_settings(checked=checked, vacuum_retention_hours=retention_hours)
    if checked:
        writers = load_settings(HandlerSettings)
        problem = vacuum_retention_problem(
            settings.vacuum_retention_hours,
            write_timeout=writers.write_timeout,
            lease_ttl=writers.lease_ttl,
        )
        if problem is not None:
            _fail(f"{problem} (--allow-short-retention when no handler writes)", EXIT_USAGE)
    try:
        vacuum = anyio.run(
            partial(vacuum_table, data_dir, settings, dry_run=dry_run, enforce=checked)
        )
    except ZoneError as exc:
        _fail(str(exc), EXIT_USAGE)
    except OSError as exc:
        _fail(f"vacuum of {data_dir} stopped: {exc}", EXIT_USAGE)
    if as_json:
        typer.echo(json.dumps(vacuum_json(data_dir, vacuum)))
    else:
        print_vacuum(Console(highlight=False, soft_wrap=True), data_dir, vacuum)


@analytics_app.command("check")
def check_command(
    data_dir: DataDir,
    *,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
) -> None:
    """List the active files of the table's newest version that storage does not hold (a
    table naming one fails every read). Exit 1 when there are any; 2 when the zone is
    missing, holds no Delta table, or the storage fails."""
    settings = table_settings()
    try:
        check = anyio.run(partial(check_table, data_dir, settings))
    except ZoneError as exc:
        _fail(str(exc), EXIT_USAGE)
    except OSError as exc:
        _fail(f"check of {data_dir} stopped: {exc}", EXIT_USAGE)
    if as_json:
        typer.echo(
            json.dumps(
                {"location": data_dir, "version": check.version, "missing": list(check.missing)}
            )
        )
    else:
        print_check(Console(highlight=False, soft_wrap=True), check)
    if check.missing:
        raise typer.Exit(EXIT_LOST)


@analytics_app.command("repair")
def repair_command(
    data_dir: DataDir,
    *,
    version: Annotated[
        int,
        typer.Option(
            "--version",
            help="the rewrite (a compaction's version) to undo",
            min=0,
            show_default=False,
        ),
    ],
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
) -> None:
    """Undo one rewrite (a compaction) in a new commit: add back the files it removed and
    remove the files it added, for a table that names files storage lost. Refused, with
    nothing changed (exit 2), when that would lose or duplicate rows: the version changed
    data, a later version rewrote its files again, or the files it removed were vacuumed."""
    settings = table_settings()
    try:
        repair = anyio.run(partial(repair_table, data_dir, settings, version))
    except ZoneError as exc:
        _fail(str(exc), EXIT_USAGE)
    except OSError as exc:
        _fail(f"repair of {data_dir} stopped: {exc}", EXIT_USAGE)
    if as_json:
        typer.echo(
            json.dumps(
                {
                    "location": data_dir,
                    "version": repair.version,
                    "restored": list(repair.restored),
                    "removed": list(repair.removed),
                }
            )
        )
    else:
        print_repair(Console(highlight=False, soft_wrap=True), repair)
