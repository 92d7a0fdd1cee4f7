"""The landing table's endurance benchmark: many small commits by concurrent writers, with
the table's upkeep running, on local disk and on S3 (MinIO).

    python -m tests.bench.table_endurance [--local-commits N] [--s3-commits N] [--writers 4]
                                          [--rows-per-commit 10] [--log-retention-seconds 60]
                                          [--keep] [--json FILE]

For each backend (``--local-commits 0`` or ``--s3-commits 0`` skips one) a fresh table is
created, then ``--writers`` writer processes commit through the production path
(``services.common.landing_zone.open_landing_zone``): ``zone.sink.write(rows)``, then
``zone.table.refresh()`` and ``zone.table.commit(files, {log_key: token})``, as the
handler's lander does, each writer on partitions of its own (so no app transaction
conflicts) and ``--rows-per-commit`` rows per commit. Meanwhile one more process runs the
upkeep the leader runs (``services.common.upkeep.TableKeeper.round``): compaction of the
due days, a checkpoint with log cleanup, and a vacuum now and then. The table's settings
(``table_settings``) keep the log for a minute (``--log-retention-seconds``) and compact
the open day at 50 small files, so both happen many times during a run.

The retention sets the log's length, rate x retention, and on a local disk every listing
of the log (a writer's refresh, each commit) reads all of its entries: about 3 us each
(13 ms at 3,500 entries). A minute at the ~25 commits/s of four writers here is a log of
about 1,500 entries, reached early in the run, so the first and the last 1,000 commits
compare the same log length and the ratio shows what grows with history. A longer
retention shows the listing's cost: 3 minutes (about 4,500 entries here) took the p50 from
45 to 77 ms.

Figures: commit latency (the ``commit`` call; ``refresh`` + ``commit``) p50 / p99 over the
first and the last 1,000 commits by completion order across writers (goal: the last within
1.5 x the first), the log's files and bytes at the end and at their largest (through
``zone.upkeep.health``), a fresh reader's open time (``DeltaTable(uri)``, then
``to_pyarrow_dataset().count_rows()``), and the rows read back against the rows committed;
and, to tell growth from noise, the commit p50, the log's files and the machine's load over
each tenth of the run. Prints one table; only a wrong row count (or a wrong app
transaction token) fails the run (exit status 1): the latencies are measured, not asserted.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import multiprocessing.synchronize
import os
import re
import secrets
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
from deltalake import DeltaTable
from pydantic import SecretStr
from rich.console import Console
from rich.table import Table

from adapters.delta import TableSettings
from adapters.s3 import S3Settings
from adapters.s3.client import s3_client
from core.errors import CommitConflictError
from core.messages import Envelope, LandedRow
from core.table import log_key, transaction_app_id
from infra.local.servers import start_minio
from services.common.landing_zone import LandingZone, open_landing_zone
from services.common.table import landed_summary
from services.common.upkeep import TableKeeper

WINDOW = 1_000  # commits at the start and at the end whose latencies are compared
GOAL = 1.5  # the last window's latency within this many times the first's
PARTITIONS_PER_WRITER = 4
LOG_ID = "endurance"
PAYLOAD_BYTES = 200
BARRIER_TIMEOUT = 300.0  # seconds for every writer to start (imports on a loaded machine)
_ERROR_CHARS = 200  # of a kind of commit error, as the report quotes it
ATTEMPTS = 10  # commits of one batch before a writer gives up (delta-rs retries inside too)


def table_settings(log_retention_seconds: float) -> TableSettings:
    """The production defaults, but a log retention of seconds and rounds every 5 s, so
    log cleanup and compaction of the open day (at 50 small files, the default) happen many
    times in a run of minutes. A vacuum every 5 minutes with a retention of 6 minutes: the
    checkpoints forget the files compacted away after that (the vacuum itself rounds it up
    to an hour, the shortest it honours), as they forget them after 6 hours by default."""
    return TableSettings(
        log_retention_hours=log_retention_seconds / 3600,
        checkpoint_interval=100,
        upkeep_interval=5.0,
        open_day_files=50,
        vacuum_interval=300.0,
        vacuum_retention_hours=0.1,
    )


def s3_settings(s3: dict[str, str]) -> S3Settings:
    return S3Settings(
        endpoint_url=s3["endpoint_url"],
        region="us-east-1",
        access_key_id=s3["access_key_id"],
        secret_access_key=SecretStr(s3["secret_access_key"]),
    )


@dataclass(frozen=True)
class Job:
    """What a child process needs (picklable): the zone, how to reach its store, the
    table's settings, and (for a writer) its share."""

    location: str
    s3: dict[str, str] | None
    table: dict[str, Any]
    out: Path
    writer: int = 0
    commits: int = 0
    rows_per_commit: int = 0

    def s3_settings(self) -> S3Settings | None:
        return None if self.s3 is None else s3_settings(self.s3)

    def zone(self) -> Any:
        return open_landing_zone(
            self.location, s3=self.s3_settings(), table=TableSettings(**self.table)
        )


# -- a writer ------------------------------------------------------------------------------


@dataclass
class Sample:
    """One batch landed: when it was confirmed (``time.monotonic``, one clock for every
    process of the machine) and the seconds each step took, over all its attempts."""

    done: float
    write: float
    refresh: float
    commit: float
    attempts: int


def writer_process(job: Job, start: multiprocessing.synchronize.Barrier) -> None:
    anyio.run(_write, job, start)


async def _write(job: Job, start: multiprocessing.synchronize.Barrier) -> None:
    partitions = range(job.writer * PARTITIONS_PER_WRITER, (job.writer + 1) * PARTITIONS_PER_WRITER)
    positions = dict.fromkeys(partitions, 0)
    tokens: dict[str, int] = {}
    samples: list[Sample] = []
    errors: list[str] = []
    async with job.zone() as zone:
        await zone.table.refresh()
        await anyio.to_thread.run_sync(start.wait)
        for n in range(job.commits):
            partition = partitions[n % len(partitions)]
            first = positions[partition]
            positions[partition] += job.rows_per_commit
            rows = [_row(job.writer, partition, p) for p in range(first, positions[partition])]
            key = log_key(LOG_ID, partition)
            token = secrets.randbits(62) + 1
            samples.append(await _land(zone, rows, key, token, errors))
            tokens[key] = token
    job.out.write_text(
        json.dumps(
            {
                "samples": [asdict(s) for s in samples],
                "tokens": tokens,
                "errors": errors,
                "peak_rss_mb": _peak_rss_mb(),
            }
        )
    )


async def _land(
    zone: LandingZone, rows: list[LandedRow], key: str, token: int, errors: list[str]
) -> Sample:
    """The lander's path for one batch: write the file, then refresh and commit until the
    commit is confirmed (a failure that reached the caller, kept in ``errors``, is
    resolved by the token)."""
    began = time.monotonic()
    files = await zone.sink.write(rows)
    write = time.monotonic() - began
    refresh = commit = 0.0
    for attempt in range(1, ATTEMPTS + 1):
        began = time.monotonic()
        await zone.table.refresh()
        refreshed = time.monotonic()
        refresh += refreshed - began
        try:
            await zone.table.commit(files, {key: token})
        except (CommitConflictError, OSError) as exc:
            commit += time.monotonic() - refreshed
            errors.append(f"{type(exc).__name__}: {exc}")
            await zone.table.refresh()
            if zone.table.token(key) != token:
                if attempt == ATTEMPTS:
                    raise
                continue
        else:
            commit += time.monotonic() - refreshed
        return Sample(time.monotonic(), write, refresh, commit, attempt)
    raise AssertionError("unreachable")


def _kind(error: str) -> str:
    """An error's first line, its numbers (versions, paths) blanked, to count alike ones."""
    return re.sub(r"\d+", "N", error.splitlines()[0] if error else error)[:_ERROR_CHARS]


def _row(writer: int, partition: int, position: int) -> LandedRow:
    now = time.time()
    envelope = Envelope(
        message_id=f"w{writer}-{partition}-{position}",
        project_id=f"project-{partition}",
        partition=partition,
        gateway_id="endurance",
        sequence=position + 1,
        received_at=now,
        payload=os.urandom(PAYLOAD_BYTES // 2).hex().encode(),
    )
    return LandedRow(envelope, 1, f"w{writer}", now, LOG_ID, position)


def _peak_rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


# -- the upkeep ----------------------------------------------------------------------------


@dataclass
class Round:
    """One round of the keeper: when it ended (``time.monotonic``), how long it took, the
    log as it left it, its error."""

    at: float
    seconds: float
    log_files: int
    log_bytes: int
    error: str | None
    load: float  # the machine's 1-minute load average (other work shares the cores)


@dataclass
class Upkept:
    rounds: list[Round]
    compactions: int
    files_compacted: int
    checkpoints: int
    log_files_removed: int
    files_vacuumed: int


def upkeep_process(job: Job, stop: multiprocessing.synchronize.Event) -> None:
    anyio.run(_upkeep, job, stop)


async def _upkeep(job: Job, stop: multiprocessing.synchronize.Event) -> None:
    """The leader's ``TableKeeper``, a round every ``upkeep_interval``."""
    settings = TableSettings(**job.table)
    rounds: list[Round] = []
    log_files_removed = 0
    async with job.zone() as zone:
        keeper = TableKeeper(zone.upkeep, settings, location=zone.address.uri)
        # Waiting out the interval on the stop event: the parent sets it when the writers
        # are done, and the round in progress finishes first.
        while not await anyio.to_thread.run_sync(stop.wait, settings.upkeep_interval):
            checkpoint = keeper.last_checkpoint
            began = time.monotonic()
            await keeper.round()
            seconds = time.monotonic() - began
            if keeper.last_checkpoint is not checkpoint and keeper.last_checkpoint is not None:
                log_files_removed += keeper.last_checkpoint.log_files_removed
            health = keeper.last_health
            rounds.append(
                Round(
                    time.monotonic(),
                    seconds,
                    health.log_files if health else 0,
                    health.log_bytes if health else 0,
                    keeper.last_error[1] if keeper.last_error else None,
                    os.getloadavg()[0],
                )
            )
    upkept = Upkept(
        rounds,
        keeper.compactions,
        keeper.files_compacted,
        keeper.checkpoints,
        log_files_removed,
        keeper.vacuumed_files,
    )
    job.out.write_text(json.dumps(asdict(upkept)))


# -- one backend ---------------------------------------------------------------------------


@dataclass
class Latency:
    p50: float
    p99: float

    def __str__(self) -> str:
        return f"{self.p50 * 1000:.1f} / {self.p99 * 1000:.1f} ms"


def latency(values: Sequence[float]) -> Latency:
    ordered = sorted(values)
    return Latency(
        statistics.median(ordered), ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    )


@dataclass
class Figures:
    backend: str
    writers: int
    commits: int
    rows_committed: int
    seconds: float
    window: int
    commit_first: Latency
    commit_last: Latency
    cycle_first: Latency  # refresh + commit
    cycle_last: Latency
    write_first: Latency
    write_last: Latency
    commit_errors: int  # commit calls that raised: each was retried, or its token showed it landed
    retries: int  # commit attempts beyond the first
    rounds: int
    rounds_failed: int
    round_p50: float
    round_max: float
    compactions: int
    files_compacted: int
    checkpoints: int
    log_files_cleaned: int
    files_vacuumed: int
    log_files_max: int
    log_bytes_max: int
    version: int
    data_files: int
    log_files: int
    log_bytes: int
    open_seconds: float
    count_seconds: float
    rows_read: int
    distinct_positions: int
    tokens_right: bool
    writer_peak_rss_mb: float
    # Over each tenth of the commits, in order: the commit call's p50 (s), and the most
    # log files an upkeep round saw in that stretch of time (-1: no round ended there).
    commit_p50_by_tenth: list[float] = field(default_factory=list)
    log_files_by_tenth: list[int] = field(default_factory=list)
    load_by_tenth: list[float] = field(default_factory=list)  # the highest 1-minute load
    notes: list[str] = field(default_factory=list)

    @property
    def rows_right(self) -> bool:
        return self.rows_read == self.distinct_positions == self.rows_committed


async def run_backend(
    console: Console,
    backend: str,
    location: str,
    s3: dict[str, str] | None,
    commits: int,
    args: argparse.Namespace,
    work: Path,
) -> Figures:
    writers, rows_per_commit = args.writers, args.rows_per_commit
    settings = table_settings(args.log_retention_seconds)
    base = Job(location, s3, settings.model_dump(), work / "upkeep.json")
    async with base.zone() as zone:
        await zone.table.refresh()  # create the table with these settings before anyone
    spawn = multiprocessing.get_context("spawn")
    start = spawn.Barrier(writers + 1, timeout=BARRIER_TIMEOUT)
    stop = spawn.Event()
    shares = [commits // writers + (1 if w < commits % writers else 0) for w in range(writers)]
    jobs = [
        Job(location, s3, base.table, work / f"writer-{w}.json", w, shares[w], rows_per_commit)
        for w in range(writers)
    ]
    procs = [spawn.Process(target=writer_process, args=(j, start)) for j in jobs]
    keeper = spawn.Process(target=upkeep_process, args=(base, stop))
    for proc in [*procs, keeper]:
        proc.start()
    try:
        await anyio.to_thread.run_sync(start.wait)
        began = time.monotonic()
        console.print(f"  {writers} writers started: {commits:,} commits ...")
        for proc in procs:
            await anyio.to_thread.run_sync(proc.join)
        seconds = time.monotonic() - began
        stop.set()
        await anyio.to_thread.run_sync(keeper.join)
    finally:
        stop.set()
        for proc in [*procs, keeper]:
            if proc.is_alive():
                proc.terminate()
                proc.join()
    failed = [p.exitcode for p in [*procs, keeper] if p.exitcode != 0]
    if failed:
        raise RuntimeError(f"{backend}: a writer or the upkeep failed (exit codes {failed})")

    results = [json.loads(j.out.read_text()) for j in jobs]
    samples = sorted((Sample(**s) for r in results for s in r["samples"]), key=lambda s: s.done)
    kept = json.loads(base.out.read_text())
    rounds = [Round(**r) for r in kept.pop("rounds")]
    upkeep = Upkept(rounds, **kept)
    window = min(WINDOW, max(1, len(samples) // 4))
    first, last = samples[:window], samples[-window:]

    async with base.zone() as zone:
        health = await zone.upkeep.health(settings.small_file_bytes)
        uri, options = zone.address.uri, zone.address.storage_options

    def read_back() -> tuple[float, float, int, int, bool]:
        began = time.monotonic()
        table = DeltaTable(uri, storage_options=options)
        opened = time.monotonic()
        rows = table.to_pyarrow_dataset().count_rows()
        counted = time.monotonic()
        positions = table.to_pyarrow_dataset().to_table(columns=["partition", "position"])
        distinct = len(positions.group_by(["partition", "position"]).aggregate([]))
        expected = {k: v for r in results for k, v in r["tokens"].items()}
        tokens_right = all(
            table.transaction_version(transaction_app_id(k)) == v for k, v in expected.items()
        )
        return opened - began, counted - opened, rows, distinct, tokens_right

    open_s, count_s, rows_read, distinct, tokens_right = await anyio.to_thread.run_sync(read_back)
    summary = await anyio.to_thread.run_sync(landed_summary, location, base.s3_settings())
    failures = [r.error for r in rounds if r.error]

    def rounds_within(stretch: list[Sample]) -> list[Round]:
        return [r for r in rounds if stretch[0].done <= r.at <= stretch[-1].done]

    tenths = [
        t
        for t in (samples[i * len(samples) // 10 : (i + 1) * len(samples) // 10] for i in range(10))
        if t
    ]
    notes = [
        f"{n:,} x an upkeep round failed: {f}" for f, n in Counter(map(_kind, failures)).items()
    ]
    errors = Counter(_kind(e) for r in results for e in r["errors"])
    notes += [f"{n:,} x a commit call raised {e}" for e, n in errors.most_common()]
    if summary.rows != rows_read:
        notes.append(f"the add actions' row counts say {summary.rows:,} rows")
    return Figures(
        backend=backend,
        writers=writers,
        commits=len(samples),
        rows_committed=len(samples) * rows_per_commit,
        seconds=seconds,
        window=window,
        commit_first=latency([s.commit for s in first]),
        commit_last=latency([s.commit for s in last]),
        cycle_first=latency([s.refresh + s.commit for s in first]),
        cycle_last=latency([s.refresh + s.commit for s in last]),
        write_first=latency([s.write for s in first]),
        write_last=latency([s.write for s in last]),
        commit_errors=errors.total(),
        retries=sum(s.attempts - 1 for s in samples),
        rounds=len(rounds),
        rounds_failed=len(failures),
        round_p50=statistics.median([r.seconds for r in rounds]) if rounds else 0.0,
        round_max=max((r.seconds for r in rounds), default=0.0),
        compactions=upkeep.compactions,
        files_compacted=upkeep.files_compacted,
        checkpoints=upkeep.checkpoints,
        log_files_cleaned=upkeep.log_files_removed,
        files_vacuumed=upkeep.files_vacuumed,
        log_files_max=max([health.log_files, *(r.log_files for r in rounds)]),
        log_bytes_max=max([health.log_bytes, *(r.log_bytes for r in rounds)]),
        version=health.version,
        data_files=health.files,
        log_files=health.log_files,
        log_bytes=health.log_bytes,
        open_seconds=open_s,
        count_seconds=count_s,
        rows_read=rows_read,
        distinct_positions=distinct,
        tokens_right=tokens_right,
        writer_peak_rss_mb=max(r["peak_rss_mb"] for r in results),
        commit_p50_by_tenth=[statistics.median(s.commit for s in t) for t in tenths],
        log_files_by_tenth=[
            max((r.log_files for r in rounds_within(t)), default=-1) for t in tenths
        ],
        load_by_tenth=[max((r.load for r in rounds_within(t)), default=-1) for t in tenths],
        notes=notes,
    )


def s3_zone(endpoint: str, access_key: str, secret_key: str) -> dict[str, str]:
    """A bucket on the server for the zone; the settings that reach it."""
    s3 = {"endpoint_url": endpoint, "access_key_id": access_key, "secret_access_key": secret_key}
    s3_client(s3_settings(s3)).create_bucket(Bucket="endurance")
    return s3


# -- the report ----------------------------------------------------------------------------


def _mb(n: int) -> str:
    return f"{n / 1e6:.2f} MB"


def report(console: Console, runs: list[Figures]) -> None:
    table = Table(title=f"landing table endurance ({os.cpu_count()} cores)")
    for column in ("figure", *(r.backend for r in runs), "goal"):
        table.add_column(column)

    def row(figure: str, *values: str, goal: str = "") -> None:
        table.add_row(figure, *values, goal)

    def verdict(first: Latency, last: Latency) -> str:
        p50, p99 = last.p50 / first.p50, last.p99 / first.p99
        ok = p50 <= GOAL and p99 <= GOAL
        return f"{p50:.2f} x / {p99:.2f} x {'PASS' if ok else 'MISS'}"

    row(
        "commits (writers x rows per commit); rows",
        *(
            f"{r.commits:,} ({r.writers} x {r.rows_committed // max(1, r.commits)}); "
            f"{r.rows_committed:,}"
            for r in runs
        ),
    )
    row("wall time; commits/s", *(f"{r.seconds:,.0f} s; {r.commits / r.seconds:.1f}" for r in runs))
    row(f"commit p50 / p99, first {runs[0].window:,}", *(str(r.commit_first) for r in runs))
    row("commit p50 / p99, last", *(str(r.commit_last) for r in runs))
    row(
        "  last / first",
        *(verdict(r.commit_first, r.commit_last) for r in runs),
        goal=f"<= {GOAL} x",
    )
    row("refresh + commit p50 / p99, first", *(str(r.cycle_first) for r in runs))
    row("refresh + commit p50 / p99, last", *(str(r.cycle_last) for r in runs))
    row(
        "  last / first",
        *(verdict(r.cycle_first, r.cycle_last) for r in runs),
        goal=f"<= {GOAL} x",
    )
    row(
        "sink write p50 / p99, first; last",
        *(f"{r.write_first}; {r.write_last}" for r in runs),
    )
    row(
        "commit calls that raised: retried / landed after all",
        *(f"{r.retries:,} / {r.commit_errors - r.retries:,}" for r in runs),
    )
    row(
        "upkeep rounds (p50, max s), failed; compactions (files)",
        *(
            f"{r.rounds:,} ({r.round_p50:.2f}, {r.round_max:.2f} s), {r.rounds_failed}; "
            f"{r.compactions:,} ({r.files_compacted:,})"
            for r in runs
        ),
    )
    row(
        "checkpoints (log files they removed); files vacuumed",
        *(f"{r.checkpoints:,} ({r.log_files_cleaned:,}); {r.files_vacuumed:,}" for r in runs),
    )
    row(
        "at the end: version; data files",
        *(f"{r.version:,}; {r.data_files:,}" for r in runs),
    )
    row(
        "log at the end (largest seen)",
        *(
            f"{r.log_files:,} files, {_mb(r.log_bytes)} "
            f"({r.log_files_max:,}, {_mb(r.log_bytes_max)})"
            for r in runs
        ),
        goal="bounded",
    )
    row(
        "fresh reader: open; count rows",
        *(f"{r.open_seconds * 1000:.0f} ms; {r.count_seconds * 1000:.0f} ms" for r in runs),
    )
    row(
        "rows read back (distinct positions) / committed",
        *(
            f"{r.rows_read:,} ({r.distinct_positions:,}) / {r.rows_committed:,} "
            f"{'PASS' if r.rows_right else 'FAIL'}"
            for r in runs
        ),
        goal="equal",
    )
    row(
        "app transaction tokens as last committed",
        *("PASS" if r.tokens_right else "FAIL" for r in runs),
    )
    row("writer peak RSS", *(f"{r.writer_peak_rss_mb:.0f} MB" for r in runs))
    row(
        "commit p50 (ms) by tenth of the commits",
        *(" ".join(f"{v * 1000:.0f}" for v in r.commit_p50_by_tenth) for r in runs),
    )
    row(
        "log files by tenth (most an upkeep round saw)",
        *(" ".join(str(v) if v >= 0 else "-" for v in r.log_files_by_tenth) for r in runs),
    )
    row(
        "machine load (1 min) by tenth, highest",
        *(" ".join(f"{v:.1f}" if v >= 0 else "-" for v in r.load_by_tenth) for r in runs),
    )
    console.print(table)
    for r in runs:
        for note in r.notes:
            console.print(f"{r.backend}: {note}")


# -- main ----------------------------------------------------------------------------------


async def run(args: argparse.Namespace) -> list[Figures]:
    console = Console(highlight=False, width=150)
    work = Path(tempfile.mkdtemp(prefix="shoal-endurance-"))
    runs: list[Figures] = []
    try:
        if args.local_commits:
            console.print("[bold]local disk[/] ...")
            where = work / "local"
            where.mkdir()
            runs.append(
                await run_backend(
                    console,
                    "local disk",
                    str(where / "zone"),
                    None,
                    args.local_commits,
                    args,
                    where,
                )
            )
        if args.s3_commits:
            console.print("[bold]S3 (MinIO)[/] ...")
            minio = await anyio.to_thread.run_sync(start_minio)
            try:
                s3 = await anyio.to_thread.run_sync(
                    s3_zone, minio.url, minio.access_key, minio.secret_key
                )
                where = work / "s3"
                where.mkdir()
                runs.append(
                    await run_backend(
                        console,
                        "S3 (MinIO)",
                        "s3://endurance/zone",
                        s3,
                        args.s3_commits,
                        args,
                        where,
                    )
                )
            finally:
                await anyio.to_thread.run_sync(minio.stop)
    finally:
        if args.keep:
            console.print(f"the run's tables and figures: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    if runs:
        report(console, runs)
    return runs


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--local-commits", type=int, default=100_000)
    parser.add_argument("--s3-commits", type=int, default=20_000)
    parser.add_argument("--writers", type=int, default=4)
    parser.add_argument("--rows-per-commit", type=int, default=10)
    parser.add_argument(
        "--log-retention-seconds",
        type=int,
        default=60,
        help="the table's delta.logRetentionDuration (whole seconds, at least 1)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the local table and figures")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    runs = anyio.run(run, args)
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in runs], indent=2))
    if not all(r.rows_right and r.tokens_right for r in runs):
        sys.exit(1)


if __name__ == "__main__":
    main()
