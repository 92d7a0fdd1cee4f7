"""The ``shoal`` command: parses options, calls core or a service, prints. No rules here."""

from __future__ import annotations

import functools
import json
import time
from enum import StrEnum
from pathlib import Path
from typing import Annotated, NoReturn

import anyio
import typer
from rich.console import Console

from core.assignment import AssignmentOptions
from core.errors import RouteError, ShoalError
from core.partitioning import DEFAULT_PARTITIONS, partition_for
from services.cli import _simulate, _status
from services.cli._analytics import analytics_app
from services.cli._dlq import dlq_app
from services.cli._keys import keys_app
from services.cli._replay import replay
from services.cli.devices import LoadPlan, LoadSummary, run_devices

__all__ = ["app", "main"]

USAGE_ERROR = 2


class NatsSync(StrEnum):
    ALWAYS = "always"
    RELAXED = "relaxed"


# `shoal up`'s backend choices, each the kind of server it runs on (services.cli._up's
# SERVER_KINDS; spelled out here so that --help needs no import of the stack's modules).
class Coordination(StrEnum):
    NATS = "nats"
    ETCD = "etcd"
    REDIS = "redis"
    KAFKA = "kafka"


class Transport(StrEnum):
    NATS = "nats"
    KAFKA = "kafka"


app = typer.Typer(
    name="shoal",
    help="Spread a partitioned message stream over an elastic pool of consumers.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # Markdown joins a docstring's wrapped lines into one paragraph (the default keeps its
    # line breaks, which cut sentences in the middle of a help table's cell).
    rich_markup_mode="markdown",
)
app.add_typer(analytics_app, name="analytics")
app.add_typer(dlq_app, name="dlq")
app.add_typer(keys_app, name="keys")
app.command("replay")(replay)


def _fail(message: str) -> NoReturn:
    """One line on stderr, exit code 2, no traceback."""
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(USAGE_ERROR)


@app.command()
def partition(
    ids: Annotated[list[str], typer.Argument(help="project ids", show_default=False)],
    partitions: Annotated[int, typer.Option("--partitions", "-p", help="partitions P")] = (
        DEFAULT_PARTITIONS
    ),
) -> None:
    """Print each project id and its partition, tab-separated (sha256 as a big-endian
    integer, mod P)."""
    try:
        lines = [f"{project_id}\t{partition_for(project_id, partitions)}" for project_id in ids]
    except ValueError as exc:
        _fail(str(exc))
    typer.echo("\n".join(lines))


@app.command()
def simulate(
    *,
    partitions: Annotated[int, typer.Option("--partitions", "-p", help="partitions P")] = (
        DEFAULT_PARTITIONS
    ),
    consumers: Annotated[int, typer.Option(help="consumers before, named c1..cN")] = 4,
    join: Annotated[
        int | None,
        typer.Option(
            help="consumers that join, named c{N+1}..  [default: 1, or 0 with --leave/--crash]",
            show_default=False,
        ),
    ] = None,
    leave: Annotated[
        list[str] | None, typer.Option(help="a consumer that leaves (repeatable)")
    ] = None,
    crash: Annotated[
        list[str] | None,
        typer.Option(help="a consumer that crashes (repeatable; same effect as --leave)"),
    ] = None,
    fan_out: Annotated[
        bool, typer.Option("--fan-out", help="also run fan-out (consumers may exceed P)")
    ] = False,
    weights: Annotated[
        Path | None,
        typer.Option(help="JSON object partition -> weight, for the weighted strategy"),
    ] = None,
    strategies: Annotated[str, typer.Option(help="comma-separated strategy names")] = ",".join(
        _simulate.DEFAULT_STRATEGIES
    ),
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
) -> None:
    """Replay a membership change: partitions moved (and the minimum), loads, time per strategy."""
    try:
        scenario = _simulate.scenario_of(partitions, consumers, join, leave or (), crash or ())
        names = _simulate.parse_strategies(strategies, fan_out)
        options = AssignmentOptions(
            partition_weights=_simulate.load_weights(weights) if weights is not None else {}
        )
        outcomes = _simulate.simulate(scenario, names, options)
    except (_simulate.SimulationError, ShoalError) as exc:
        _fail(str(exc))
    if as_json:
        typer.echo(json.dumps(_simulate.to_json(scenario, outcomes)))
        return
    console = Console(highlight=False)
    console.print(scenario.describe(), markup=False, soft_wrap=True)
    console.print(_simulate.outcomes_table(outcomes))
    console.print(_simulate.fewest_moves_line(outcomes), markup=False, soft_wrap=True)


@app.command()
def devices(
    *,
    gateway: Annotated[str, typer.Option(help="gateway base URL")] = "http://127.0.0.1:8080",
    projects: Annotated[int, typer.Option(min=1, help="distinct project ids")] = 100,
    rate: Annotated[float, typer.Option(min=0.1, help="messages per second")] = 200.0,
    duration: Annotated[
        float | None, typer.Option(min=0.1, help="seconds (default: until Ctrl-C)")
    ] = None,
    batch: Annotated[int, typer.Option(min=1, max=10_000, help="messages per request")] = 10,
    api_key: Annotated[
        str | None,
        typer.Option(
            envvar="SHOAL_API_KEY",
            help="the gateway's API key (`shoal up` prints one; `shoal keys create`)",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Simulate IoT devices: post NDJSON batches over many projects to a gateway."""
    plan = LoadPlan(
        messages=None,
        projects=projects,
        batch=batch,
        concurrency=8,
        rate=rate,
        keep_ids=False,
        idempotency_keys=True,
        retry_after_stop=False,
    )
    console = Console(highlight=False, stderr=True, soft_wrap=True)
    shown = [""]

    def report(summary: LoadSummary, elapsed: float) -> None:
        console.print(
            f"{elapsed:6.0f} s  accepted {summary.accepted_count:>9,}  "
            f"({summary.accepted_count / max(elapsed, 1e-9):,.0f}/s)  "
            f"refused {sum(summary.rejected.values()):,}  retried {summary.retried:,}"
        )
        if summary.last_error != shown[0]:  # say why once, not on every line
            shown[0] = summary.last_error
            console.print(f"        last error: {summary.last_error}")

    try:
        summary = anyio.run(
            functools.partial(run_devices, gateway, plan, duration, report, api_key=api_key)
        )
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    typer.echo(summary.line())
    if summary.failed_batches:
        console.print(
            f"error: {summary.failed_batches:,} batch{'es' if summary.failed_batches != 1 else ''}"
            f" not accepted; the last error: {summary.last_error}"
        )
        raise typer.Exit(1)


app.command(name="status")(_status.status)


@app.command()
def up(
    *,
    projects: Annotated[int, typer.Option(min=1, help="simulated project ids")] = 100,
    rate: Annotated[float, typer.Option(min=0.1, help="simulated messages per second")] = 200.0,
    duration: Annotated[
        float | None, typer.Option(min=1, help="stop after this many seconds (default: Ctrl-C)")
    ] = None,
    handlers: Annotated[int, typer.Option(min=1, max=64, help="handler processes")] = 3,
    data_dir: Annotated[
        str | None,
        typer.Option(
            help="landing zone: a directory (default: var/up/TIMESTAMP), or s3://bucket/prefix "
            "(the store SHOAL_S3_ENDPOINT_URL / AWS_* name; without one, a local MinIO)"
        ),
    ] = None,
    simulator: Annotated[bool, typer.Option(help="run the device simulator")] = True,
    coordination: Annotated[
        Coordination,
        typer.Option(
            help="where membership, election and the assignment live (the server it needs is "
            "started, and installed first if missing)"
        ),
    ] = Coordination.NATS,
    transport: Annotated[
        Transport, typer.Option(help="the message broker between the gateway and the handlers")
    ] = Transport.NATS,
    partitions: Annotated[
        int, typer.Option(min=1, max=100_000, help="partitions of the stream")
    ] = 128,
    gateway_port: Annotated[
        int, typer.Option(min=1, max=65535, help="the gateway's port (taken: any free one)")
    ] = 8080,
    dashboard_port: Annotated[
        int,
        typer.Option(
            min=1,
            max=65535,
            help="the first leader's status API and dashboard (taken: any free one); the "
            "second leader's is the next port",
        ),
    ] = 8090,
    nats_sync: Annotated[
        NatsSync,
        typer.Option(
            help="always: nats-server fsyncs every write (durable on one server); relaxed: "
            "the server's default sync interval (faster, as replicated streams run)"
        ),
    ] = NatsSync.ALWAYS,
) -> None:
    """Run the whole pipeline locally on real servers: those of the backend pair (default:
    one nats-server for both), 2 leaders, handlers under the local scaler, a gateway, and a
    device simulator."""
    from services.cli._up import UpOptions, run_up  # noqa: PLC0415 (see _lazy)

    options = UpOptions(
        projects=projects,
        rate=rate,
        duration=duration,
        handlers=handlers,
        data_dir=data_dir,
        simulator=simulator,
        partitions=partitions,
        gateway_port=gateway_port,
        dashboard_port=dashboard_port,
        coordination=coordination.value,
        transport=transport.value,
        nats_sync_always=nats_sync is NatsSync.ALWAYS,
    )
    try:
        anyio.run(run_up, options, Console(highlight=False, stderr=True))
    except RuntimeError as exc:
        _fail(str(exc))


@app.command(
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
)
def bench(ctx: typer.Context) -> None:
    """The pipeline benchmark (the same as `tox -e bench`): shoal end to end against plain
    nats-py and aiokafka, durable and relaxed, on servers it starts; prints one table.
    Options go to it: --messages N, --quick, --transports nats,kafka,
    --modes durable,relaxed, --no-rebalance, --keep, --json FILE."""
    import subprocess  # noqa: PLC0415 (see _lazy)
    import sys  # noqa: PLC0415

    checkout = Path(__file__).resolve().parents[2]
    if not (checkout / "tests" / "bench" / "pipeline.py").is_file():
        _fail(f"the benchmark ships with the source checkout; not found under {checkout}")
    done = subprocess.run(
        [sys.executable, "-m", "tests.bench.pipeline", *ctx.args], cwd=checkout, check=False
    )
    raise typer.Exit(done.returncode)


@app.command()
def migrate(
    *,
    project_prefix: Annotated[
        str, typer.Option("--project-prefix", help="projects whose id starts with this")
    ],
    to: Annotated[str, typer.Option("--to", help="the cluster (of SHOAL_CLUSTERS) to move to")],
    ordered: Annotated[
        bool,
        typer.Option(
            "--ordered",
            help="keep per-project order: produce to the target at once, hold its messages "
            "back until the sources drained",
        ),
    ] = False,
    settle: Annotated[
        float | None,
        typer.Option(
            min=0.0,
            help="seconds each stored table gets to be applied everywhere (default: "
            "SHOAL_GATEWAY_PUBLISH_TIMEOUT + 1 s, by when a request that read the old table "
            "has stored its messages or given up)",
            show_default=False,
        ),
    ] = None,
    drain_timeout: Annotated[float, typer.Option(help="seconds the drain step may take")] = 300.0,
    partitions: Annotated[int, typer.Option(envvar="SHOAL_PARTITIONS", help="partitions P")] = (
        DEFAULT_PARTITIONS
    ),
) -> None:
    """Move a project prefix to another datacenter: consume from both, produce to the
    target, wait until the sources drained, consume from the target only (SHOAL_CLUSTERS,
    SHOAL_ROUTES_FILE, SHOAL_NATS_*). Prints each step with its duration and counts."""
    from contextlib import AsyncExitStack  # noqa: PLC0415 (see _lazy)

    from services.cli._migrate import (  # noqa: PLC0415 (see _lazy)
        MigrationError,
        StepDone,
        open_datacenters,
    )
    from services.cli._migrate import migrate as run_migration  # noqa: PLC0415 (see _lazy)

    def report(step: StepDone) -> None:
        typer.echo(f"step {step.number}/{step.of} {step.why}: {step.seconds:.2f} s; {step.detail}")

    if settle is None:
        from services.common.settings import (  # noqa: PLC0415 (see _lazy)
            GatewaySettings,
            load_settings,
        )

        gateway = load_settings(GatewaySettings)  # a request publishes until its deadline
        settle = max(gateway.publish_deadline, gateway.publish_timeout) + 1.0

    async def run() -> None:
        async with AsyncExitStack() as stack:
            clusters, routes, transports = await open_datacenters(
                stack, prefix=project_prefix, target=to, ordered=ordered
            )
            await run_migration(
                prefix=project_prefix,
                target=to,
                ordered=ordered,
                routes=routes,
                clusters=clusters,
                transports=transports,
                partitions=partitions,
                settle=settle,
                drain_timeout=drain_timeout,
                report=report,
            )

    started = time.monotonic()
    try:
        anyio.run(run)
    except RouteError as exc:
        _fail(str(exc))
    except (MigrationError, ShoalError, OSError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    typer.echo(f"migrated {project_prefix}* to {to} in {time.monotonic() - started:.2f} s")


# _lazy: the service commands import their service when run, so that `shoal partition` and
# `shoal simulate` start without loading grpc, nats and uvicorn.


@app.command()
def gateway() -> None:
    """Run a gateway (configured by SHOAL_* and SHOAL_GATEWAY_* variables)."""
    from services.gateway.main import main as run_gateway  # noqa: PLC0415 (see _lazy)

    run_gateway()


@app.command()
def handler() -> None:
    """Run a handler (configured by SHOAL_* and SHOAL_HANDLER_* variables)."""
    from services.handler.main import main as run_handler  # noqa: PLC0415 (see _lazy)

    run_handler()


@app.command()
def leader() -> None:
    """Run a leader replica with its status API (SHOAL_* and SHOAL_LEADER_* variables)."""
    from services.leader.main import main as run_leader  # noqa: PLC0415 (see _lazy)

    run_leader()


def main() -> None:
    """Console-script entry point (``shoal``)."""
    app()


if __name__ == "__main__":
    main()
