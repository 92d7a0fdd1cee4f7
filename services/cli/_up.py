"""``shoal up``: the whole pipeline on this machine, on real servers, with a device simulator.

It starts the servers the chosen backend pair needs (``--coordination`` nats, etcd, redis
or kafka; ``--transport`` nats or kafka; by default NATS for both, so one nats-server), first
installing those that are missing as bin/test does (``infra/local/install.sh``), then two
leader replicas whose local scaler runs the handlers (the active leader keeps the pool at
``--handlers`` and may grow it under load), one gateway, and the device simulator. It
prints ``backends: coordination=C transport=T``, ``gateway: URL``, ``api key: KEY`` (an
admin key; its simulator uses it), ``dashboard: URL`` and ``data: DIR``, then a progress
line every few seconds, and on Ctrl-C or SIGTERM stops everything it started within 15 s.
A pair that cannot start ends with one ``error: ...`` line saying why.

The progress line counts what this run did, whoever sent it: ``accepted``, the messages
the gateway answered 202 (from its acceptance ledger), ``landed``, the rows added to the
zone's Delta table, and ``rate``, the rows landed per second over the handlers' roll age
and a little more (rows land a file at a time, so a shorter window would read 0 between
rolls). Once every handler has drained and stopped, one last line on stdout says
``stopped: accepted N  landed N  table ZONE (version V)``.

Every child runs in its own process group behind the local scaler's launcher, so none of
them outlives ``shoal up`` even if it is killed with SIGKILL.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import httpx
from botocore.exceptions import BotoCoreError, ClientError
from pydantic import SecretStr, ValidationError
from rich.console import Console

from adapters.keys import ApiKeyFile
from adapters.local import launch_argv
from adapters.s3 import S3Location, S3Settings
from adapters.s3.client import s3_client
from infra.local.kafka import find_java, kafka_libs
from infra.local.servers import (
    ServerGroup,
    etcd_binary,
    free_port,
    nats_binary,
    redis_binary,
    start_etcd,
    start_kafka,
    start_minio,
    start_nats,
    start_redis,
)
from services.cli._keys import new_admin_key
from services.cli._status import state_file
from services.cli.devices import LoadGenerator, LoadPlan
from services.common.backends import COORDINATION_BACKENDS
from services.common.settings import TRANSPORT_BACKENDS, HandlerSettings
from services.common.table import LandedSummary, landed_summary
from services.common.table_address import is_object_store

__all__ = [
    "SERVER_KINDS",
    "AcceptanceLedgers",
    "LandingRate",
    "UpOptions",
    "accepted_messages",
    "final_line",
    "run_up",
    "servers_for",
]

STOP_BOUND = 15.0  # everything is gone this long after Ctrl-C
PROGRESS_EVERY = 3.0  # seconds between progress lines
_CHILD_TERM_BOUND = 11.0  # a child's launcher SIGKILLs it this long after SIGTERM
_HANDLER_DRAIN_TIMEOUT = 5.0
_GATEWAY_STOP_BOUND = 3.0  # then the handlers are stopped, whether the gateway has exited or not


@dataclass(frozen=True)
class UpOptions:
    projects: int = 100
    rate: float = 200.0
    duration: float | None = None
    handlers: int = 3
    data_dir: str | None = None  # a directory or s3://bucket/prefix
    simulator: bool = True
    partitions: int = 128
    coordination: str = "nats"
    transport: str = "nats"
    gateway_port: int = 8080
    dashboard_port: int = 8090
    # True: nats-server fsyncs every write (survives a power loss on one server); False:
    # the server's default sync interval (faster; what replicated streams usually run).
    nats_sync_always: bool = True


@dataclass
class _Child:
    name: str
    popen: subprocess.Popen[bytes]
    log_path: Path


class LandingRate:
    """Rows landed per second over the last ``window`` seconds, from samples of the table's
    row count. Rows land in steps, a handler's file at a time: over a window shorter than
    the time between a handler's rolls the rate would read 0 between them."""

    def __init__(self, window: float) -> None:
        self.window = window
        self._samples: deque[tuple[float, int]] = deque()

    def add(self, at: float, rows: int) -> float:
        """Record ``rows`` landed in all at time ``at`` (not before the last sample's); the
        rate over the window that ends there (since the first sample until there is a whole
        window of them)."""
        samples = self._samples
        samples.append((at, rows))
        start = at - self.window
        while len(samples) > 1 and samples[1][0] <= start:
            samples.popleft()
        first_at, first_rows = samples[0]
        if first_at >= start:
            span = at - first_at
            return (rows - first_rows) / span if span > 0 else 0.0
        # The count at the window's start, read between the samples around it: a step that
        # landed between them counts for the part of their interval the window covers.
        next_at, next_rows = samples[1]
        base = first_rows + (next_rows - first_rows) * (start - first_at) / (next_at - first_at)
        return (rows - base) / self.window


def accepted_messages(ledger_lines: Iterable[bytes]) -> int:
    """The messages an acceptance ledger's lines (``adapters.ledger``) record as accepted:
    each line is one request's sequence range. A line that is not a whole record (one a
    crash cut short) is skipped."""
    count = 0
    for line in ledger_lines:
        try:
            entry = json.loads(line)
            if entry["outcome"] == "accepted":
                count += int(entry["last_sequence"]) - int(entry["first_sequence"]) + 1
        except (ValueError, KeyError, TypeError):
            continue
    return count


class AcceptanceLedgers:
    """The messages the gateways accepted since ``skip_existing``: what their acceptance
    ledgers (``{directory}/{gateway process}.jsonl``) record, reading only what was appended
    since the last look. A line still being written is read at the next look."""

    def __init__(self, directory: Path) -> None:
        self._directory = directory
        self._read_to: dict[Path, int] = {}
        self.count = 0

    def skip_existing(self) -> None:
        for path in self._directory.glob("*.jsonl"):
            self._read_to[path] = path.stat().st_size

    def refresh(self) -> int:
        """The count, caught up with the ledgers."""
        for path in sorted(self._directory.glob("*.jsonl")):
            offset = self._read_to.get(path, 0)
            with path.open("rb") as ledger:
                ledger.seek(offset)
                appended = ledger.read()
            whole_lines = appended[: appended.rfind(b"\n") + 1]
            self.count += accepted_messages(whole_lines.splitlines())
            self._read_to[path] = offset + len(whole_lines)
        return self.count


@dataclass(frozen=True)
class _Counts:
    accepted: int
    landed: int
    version: int  # the table's newest version; -1: no table yet


class _Tally:
    """What this run accepted and landed, from the gateways' acceptance ledgers and the
    zone's table, less what they held when it started (a data dir used before, a bucket
    prefix other runs wrote). Blocking: call it from a worker thread."""

    def __init__(self, ledger_dir: Path, zone: str | Path, s3: S3Settings | None) -> None:
        self._accepted = AcceptanceLedgers(ledger_dir)
        self._zone = zone
        self._s3 = s3
        self._table = LandedSummary(-1, 0, ())
        self._landed_before = 0

    def start(self) -> None:
        """Take what is there as the baseline (before the gateway starts)."""
        self._accepted.skip_existing()
        self._table = landed_summary(self._zone, self._s3)
        self._landed_before = self._table.rows

    def read(self) -> _Counts:
        """The counts now; a source that cannot be read keeps its last count."""
        with contextlib.suppress(OSError):
            self._accepted.refresh()
        with contextlib.suppress(OSError, ValueError):
            self._table = landed_summary(self._zone, self._s3)
        return _Counts(
            self._accepted.count, self._table.rows - self._landed_before, self._table.version
        )


def final_line(accepted: int, landed: int, zone: str | Path, version: int) -> str:
    table = f"version {version}" if version >= 0 else "no table yet"
    return f"stopped: accepted {accepted:,}  landed {landed:,}  table {zone} ({table})"


def _handlers_roll_age() -> float:
    """The roll age the handlers will read from the environment they inherit."""
    try:
        return HandlerSettings(drain_timeout=_HANDLER_DRAIN_TIMEOUT).roll_age
    except ValidationError as exc:  # the handlers would refuse to start: say so first
        raise RuntimeError(f"invalid SHOAL_HANDLER_* settings: {exc}") from exc


def _port(preferred: int) -> int:
    """``preferred`` if nothing listens there, else any free loopback port."""
    with socket.socket() as probe:
        # As the servers bind: a port whose old connections linger in TIME_WAIT is free.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", preferred))
        except OSError:
            return free_port()
    return preferred


# --- the servers of a backend pair ---------------------------------------------------------

# The coordination state (assignment, registrations, holds) must survive a restart of
# redis-server: an append-only file, fsynced on every write.
_REDIS_DURABLE = ("--appendonly", "yes", "--appendfsync", "always")
_INSTALL_SH = Path(__file__).resolve().parents[2] / "infra" / "local" / "install.sh"


@dataclass(frozen=True)
class _Started:
    address: str  # shown in the state file (`servers`)
    env: dict[str, str]  # the SHOAL_* settings that point a backend at it


async def _nats(servers: ServerGroup, data: Path, options: UpOptions) -> _Started:
    nats = await servers.astart(start_nats, data, keep=True, sync_always=options.nats_sync_always)
    return _Started(
        nats.url,
        {
            "SHOAL_NATS_URL": nats.url,
            "SHOAL_NATS_MONITOR_URL": nats.monitor_url,
            "SHOAL_NATS_REQUIRE_SYNC_ALWAYS": str(options.nats_sync_always).lower(),
        },
    )


async def _etcd(servers: ServerGroup, data: Path, options: UpOptions) -> _Started:
    etcd = await servers.astart(start_etcd, data, keep=True)
    return _Started(etcd.endpoint, {"SHOAL_ETCD_ENDPOINTS": etcd.endpoint})


async def _redis(servers: ServerGroup, data: Path, options: UpOptions) -> _Started:
    redis = await servers.astart(start_redis, data, keep=True, extra_args=_REDIS_DURABLE)
    return _Started(redis.url, {"SHOAL_REDIS_URL": redis.url})


async def _kafka(servers: ServerGroup, data: Path, options: UpOptions) -> _Started:
    kafka = await servers.astart(start_kafka, data, keep=True)
    return _Started(kafka.bootstrap, {"SHOAL_KAFKA_BOOTSTRAP_SERVERS": kafka.bootstrap})


def _kafka_installed() -> None:
    find_java()
    kafka_libs()


@dataclass(frozen=True)
class _Kind:
    """One kind of server: how to tell it is installed (raises FileNotFoundError when not;
    install.sh installs it under the same name) and how to start it."""

    check: Callable[[], object]
    start: Callable[[ServerGroup, Path, UpOptions], Awaitable[_Started]]


# A backend is named after the server it runs on; NATS coordination (JetStream KV) reads the
# transport's variables (SHOAL_NATS_*), so both roles share one nats-server.
_KINDS = {
    "nats": _Kind(nats_binary, _nats),
    "etcd": _Kind(etcd_binary, _etcd),
    "redis": _Kind(redis_binary, _redis),
    "kafka": _Kind(_kafka_installed, _kafka),
}
SERVER_KINDS = tuple(_KINDS)


def servers_for(coordination: str, transport: str) -> tuple[str, ...]:
    """The servers a pair runs on, each once (kafka+kafka: one broker for both roles)."""
    return tuple(dict.fromkeys((coordination, transport)))


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


async def _install(kinds: Sequence[str], console: Console) -> None:
    """Install, as bin/test does, the servers among ``kinds`` that are not there yet (etcd
    and redis-server from Debian, Kafka's jars from Maven Central; nats-server comes with
    the venv), so a machine needs only what the chosen pair runs on."""
    missing = []
    for kind in kinds:
        try:
            await anyio.to_thread.run_sync(_KINDS[kind].check)
        except FileNotFoundError:
            missing.append(kind)
    if not missing:
        return
    try:
        with console.status(f"installing {' '.join(missing)} (infra/local/install.sh) ..."):
            done = await anyio.run_process(
                ["bash", str(_INSTALL_SH), *missing], check=False, stderr=subprocess.STDOUT
            )
    except OSError as exc:  # no bash, or the script is not there
        raise RuntimeError(f"cannot install {' '.join(missing)}: {exc}") from exc
    output = done.stdout.decode(errors="replace").strip().splitlines()
    if done.returncode != 0:
        errors = [line for line in output if "ERROR" in line] or output[-1:]
        reason = errors[-1] if errors else f"exit status {done.returncode}"
        raise RuntimeError(f"cannot install {' '.join(missing)}: {reason}")
    for line in output:
        console.print(line, markup=False, highlight=False)


def _check_pair(coordination: str, transport: str) -> None:
    """Refuse, before anything starts, a pair the services would reject at start-up (the
    CLI spells its choices out, so that --help imports none of the services' modules)."""
    for role, name, accepted in (
        ("coordination", coordination, COORDINATION_BACKENDS),
        ("transport", transport, TRANSPORT_BACKENDS),
    ):
        if name not in accepted:
            raise RuntimeError(
                f"{role} {name!r} is not supported by the services yet "
                f"(SHOAL_{role.upper()} accepts {', '.join(accepted)})"
            )


async def _start_servers(stack: _Stack, servers: ServerGroup) -> dict[str, str]:
    """Start the pair's servers; the SHOAL_* settings of both roles. A server that does not
    start ends ``shoal up`` with one line saying which and why (the group stops the others)."""
    options = stack.options
    roles = {"coordination": options.coordination, "transport": options.transport}
    kinds = servers_for(options.coordination, options.transport)
    await _install(kinds, stack.console)
    env = {"SHOAL_COORDINATION": options.coordination, "SHOAL_TRANSPORT": options.transport}
    for kind in kinds:
        data = stack.run_dir / kind
        try:
            with stack.console.status(f"starting {kind} ..."):
                started = await _KINDS[kind].start(servers, data, options)
        except (OSError, RuntimeError) as exc:  # not installed, or never became ready
            used_by = " and ".join(role for role, name in roles.items() if name == kind)
            raise RuntimeError(
                f"{kind} (the {used_by}) did not start: {_first_line(exc)} (log in {data})"
            ) from exc
        stack.servers[kind] = started.address
        env |= started.env
        if kind == options.transport:  # how `shoal dlq` reaches the broker
            stack.transport_env = {"SHOAL_TRANSPORT": kind, **started.env}
    return env


def _run_dir(options: UpOptions) -> Path:
    if options.data_dir is not None and not is_object_store(options.data_dir):
        return Path(options.data_dir).resolve()
    return (Path("var") / "up" / time.strftime("%Y%m%d-%H%M%S")).resolve()


class _Stack:
    def __init__(self, options: UpOptions, console: Console) -> None:
        self.options = options
        self.console = console
        # The landing zone is the data dir itself (or an s3:// zone); logs, server state and
        # the gateway's ledger go under the data dir's `_run` and `_ledger`, which readers
        # of the landing zone skip.
        self.data_dir = _run_dir(options)
        self.zone: str | Path = (
            options.data_dir
            if options.data_dir is not None and is_object_store(options.data_dir)
            else self.data_dir
        )
        self.s3: S3Settings | None = None  # set when the zone is on S3
        self.s3_env: dict[str, str] = {}
        self.run_dir = self.data_dir / "_run"
        self.log_dir = self.run_dir / "logs"
        self.ledger_dir = self.data_dir / "_ledger"
        self.roll_age = _handlers_roll_age()
        self.children: list[_Child] = []
        self.gateway_url = ""
        self.status_urls: list[str] = []
        self.servers: dict[str, str] = {}
        self.transport_env: dict[str, str] = {}  # how `shoal dlq` reaches the broker
        self.api_keys_file = self.run_dir / "api_keys.json"
        self.api_key = ""  # an admin key: the simulator's, printed for the user

    def env(self, **extra: str) -> dict[str, str]:
        """The parent's environment (so any SHOAL_* the user set applies), then ours."""
        return {**os.environ, "PYTHONUNBUFFERED": "1", **extra}

    def spawn(self, name: str, module: str, env: dict[str, str]) -> _Child:
        log_path = self.log_dir / f"{name}.log"
        with log_path.open("ab") as out:
            popen = subprocess.Popen(
                launch_argv([sys.executable, "-m", module], stop_bound=_CHILD_TERM_BOUND),
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                process_group=0,  # Ctrl-C in the terminal reaches shoal up only
                close_fds=True,
            )
        child = _Child(name, popen, log_path)
        self.children.append(child)
        return child

    async def stop_all(self, within: float) -> None:
        """Stop the gateway, then, once it has exited (or after _GATEWAY_STOP_BOUND), the
        leaders and their handlers; what still runs ``within`` seconds after the start is
        killed. The gateway answers the requests in flight before it exits: the handlers,
        still fetching meanwhile, then hold every message it accepted when they drain."""
        deadline = anyio.current_time() + within
        gateways = [child for child in self.children if child.name == "gateway"]
        self._terminate(gateways)
        with anyio.move_on_after(_GATEWAY_STOP_BOUND):
            for child in gateways:
                await anyio.to_thread.run_sync(child.popen.wait, abandon_on_cancel=True)
        self._terminate([child for child in self.children if child not in gateways])
        with anyio.move_on_after(deadline - anyio.current_time()):
            for child in self.children:
                await anyio.to_thread.run_sync(child.popen.wait, abandon_on_cancel=True)
        for child in self.children:
            if child.popen.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(child.popen.pid, signal.SIGKILL)
                child.popen.wait(timeout=2)

    @staticmethod
    def _terminate(children: Sequence[_Child]) -> None:
        """SIGTERM to each child's launcher only: it forwards exactly one to the child. A
        signal to the whole process group would reach the child twice (directly and
        forwarded), and a second signal means "exit now": a leader would then abandon its
        handlers' drain while the servers they drain against are being stopped."""
        for child in children:
            if child.popen.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(child.popen.pid, signal.SIGTERM)

    def check_children(self) -> None:
        for child in self.children:
            code = child.popen.poll()
            if code is not None:
                tail = child.log_path.read_text(errors="replace").splitlines()[-15:]
                raise RuntimeError(
                    f"{child.name} exited with status {code}; last lines of {child.log_path}:\n"
                    + "\n".join(tail)
                )


def _write_state(stack: _Stack, dashboard: str) -> Path:
    path = state_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    state = {
        "pid": os.getpid(),
        "gateway": stack.gateway_url,
        "dashboard": dashboard,
        "status_urls": stack.status_urls,
        "data_dir": str(stack.zone),
        "log_dir": str(stack.log_dir),
        "servers": stack.servers,
        "transport_env": stack.transport_env,
        "api_keys_file": str(stack.api_keys_file),
        "started_at": time.time(),
    }
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(state, indent=2))
    temporary.replace(path)
    return path


@contextlib.contextmanager
def _state_file(stack: _Stack, dashboard: str) -> Iterator[None]:
    path = _write_state(stack, dashboard)
    try:
        yield
    finally:
        with contextlib.suppress(OSError, ValueError):
            if json.loads(path.read_text()).get("pid") == os.getpid():
                path.unlink()


async def _wait_ready(client: httpx.AsyncClient, stack: _Stack) -> dict[str, Any]:
    """Until the gateway is ready and the leader has spread the partitions over the pool."""
    wanted = stack.options.handlers
    while True:
        stack.check_children()
        with contextlib.suppress(httpx.HTTPError, ValueError, KeyError, TypeError):
            ready = await client.get(f"{stack.gateway_url}/readyz")
            doc: dict[str, Any] = (await client.get(stack.status_urls[0])).json()
            owners = {p["owner"] for p in doc["partitions"]}
            if (
                ready.status_code == 200
                and len(doc["members"]) >= wanted
                and None not in owners
                and len(owners) >= min(wanted, stack.options.partitions)
            ):
                return doc
        await anyio.sleep(0.25)  # other processes: polled, there is no event


async def run_up(options: UpOptions, console: Console) -> None:
    _check_pair(options.coordination, options.transport)
    stack = _Stack(options, console)
    stack.log_dir.mkdir(parents=True, exist_ok=True)
    stop = anyio.Event()
    failure: RuntimeError | None = None
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with anyio.create_task_group() as tg:

            async def on_signal() -> None:
                async for _ in signals:
                    stop.set()

            tg.start_soon(on_signal)
            try:
                await _serve(stack, stop)
            except RuntimeError as exc:
                failure = exc  # raised here, the task group would wrap it in a group
            tg.cancel_scope.cancel()
    if failure is not None:
        raise failure


async def _serve(stack: _Stack, stop: anyio.Event) -> None:
    options, console = stack.options, stack.console
    async with ServerGroup(stop_timeout=3) as servers:
        backends = await _start_servers(stack, servers)
        if is_object_store(stack.zone):
            await _object_store(stack, servers)
        if stop.is_set():  # Ctrl-C while the servers started (Kafka takes seconds)
            return
        async with ApiKeyFile(stack.api_keys_file, create=True) as keys:
            stack.api_key = await new_admin_key(keys, label=f"shoal up {time.strftime('%F %T')}")
        tally = _Tally(stack.ledger_dir, stack.zone, stack.s3)
        try:
            await anyio.to_thread.run_sync(tally.start)
        except (OSError, ValueError) as exc:
            raise RuntimeError(f"cannot read the table at {stack.zone}: {exc}") from exc
        ran = False
        gateway_port = _port(options.gateway_port)
        leader_ports = [_port(options.dashboard_port)]
        leader_ports.append(_port(leader_ports[0] + 1) if leader_ports[0] + 1 < 65536 else 0)
        leader_ports = [p or free_port() for p in leader_ports]
        common = {
            "SHOAL_PARTITIONS": str(options.partitions),
            **backends,
            "SHOAL_HANDLER_DATA_DIR": str(stack.zone),
            "SHOAL_HANDLER_DRAIN_TIMEOUT": str(_HANDLER_DRAIN_TIMEOUT),
            **stack.s3_env,
        }
        scaling = {
            "SHOAL_SCALING_SCALER": "local",
            "SHOAL_SCALING_MIN_REPLICAS": os.environ.get(
                "SHOAL_SCALING_MIN_REPLICAS", str(options.handlers)
            ),
            "SHOAL_SCALING_MAX_REPLICAS": os.environ.get(
                "SHOAL_SCALING_MAX_REPLICAS", str(options.handlers + 3)
            ),
            # A livelier demo than the reference's 30 s / 10 min; the user's env wins.
            "SHOAL_SCALING_INTERVAL": os.environ.get("SHOAL_SCALING_INTERVAL", "10"),
            "SHOAL_SCALING_COOLDOWN": os.environ.get("SHOAL_SCALING_COOLDOWN", "60"),
            "SHOAL_LOCAL_LOG_DIR": str(stack.log_dir),
            "SHOAL_LOCAL_STOP_TIMEOUT": "8",
        }
        peers = ",".join(f"http://127.0.0.1:{port}" for port in leader_ports)
        for index, port in enumerate(leader_ports, start=1):
            stack.spawn(
                f"leader-{index}",
                "services.leader",
                stack.env(
                    **common,
                    **scaling,
                    SHOAL_LEADER_ID=f"leader-{index}",
                    SHOAL_LEADER_PORT=str(port),
                    SHOAL_LEADER_PEERS=peers,
                    SHOAL_LEADER_DATA_DIR=str(stack.zone),  # the active one keeps the table up
                ),
            )
            stack.status_urls.append(f"http://127.0.0.1:{port}/status")
        stack.spawn(
            "gateway",
            "services.gateway",
            stack.env(
                **common,
                SHOAL_GATEWAY_ID="gateway-1",
                SHOAL_GATEWAY_PORT=str(gateway_port),
                SHOAL_GATEWAY_LEDGER_DIR=str(stack.ledger_dir),
                SHOAL_GATEWAY_API_KEYS_FILE=str(stack.api_keys_file),
            ),
        )
        stack.gateway_url = f"http://127.0.0.1:{gateway_port}"
        dashboard = f"http://127.0.0.1:{leader_ports[0]}/"
        try:
            async with httpx.AsyncClient(timeout=3.0, trust_env=False) as client:
                with (
                    anyio.move_on_after(90) as starting,
                    console.status("starting leaders, handlers and the gateway ..."),
                ):
                    ready = anyio.Event()
                    async with anyio.create_task_group() as waiting:

                        async def until_ready() -> None:
                            await _wait_ready(client, stack)
                            ready.set()
                            waiting.cancel_scope.cancel()

                        async def until_stop() -> None:
                            await stop.wait()
                            waiting.cancel_scope.cancel()

                        waiting.start_soon(until_ready)
                        waiting.start_soon(until_stop)
                if starting.cancelled_caught:
                    raise RuntimeError(
                        f"the stack was not ready within 90 s; logs: {stack.log_dir}"
                    )
                if not ready.is_set():
                    return
                with _state_file(stack, dashboard):
                    print(
                        f"backends: coordination={options.coordination} "
                        f"transport={options.transport}",
                        flush=True,
                    )
                    print(f"gateway: {stack.gateway_url}", flush=True)
                    print(f"api key: {stack.api_key}", flush=True)
                    print(f"dashboard: {dashboard}", flush=True)
                    print(f"data: {stack.zone}", flush=True)
                    if "s3" in stack.servers:
                        print(f"s3: {stack.servers['s3']}", flush=True)
                    await _run(stack, stop, client, tally)
                    ran = True
        finally:
            # Children first, while the servers they drain against still run.
            with anyio.CancelScope(shield=True):
                console.print("stopping ...")
                await stack.stop_all(STOP_BOUND - 4)
        if ran:  # the handlers drained and the gateway's ledger is complete: the last word
            counts = await anyio.to_thread.run_sync(tally.read)
            print(
                final_line(counts.accepted, counts.landed, stack.zone, counts.version), flush=True
            )


async def _object_store(stack: _Stack, servers: ServerGroup) -> None:
    """The zone's store: the one the environment names (SHOAL_S3_ENDPOINT_URL, or the AWS
    SDK's own variables and profiles), else a MinIO started under the run dir. Its bucket
    is created when missing."""
    where = S3Location.parse(str(stack.zone))
    settings = S3Settings()
    if settings.endpoint_url is None and not os.environ.get("AWS_ENDPOINT_URL"):
        minio = await servers.astart(start_minio, stack.run_dir / "minio", keep=True)
        stack.s3_env = minio.s3_env()
        settings = S3Settings(
            endpoint_url=minio.url,
            region="us-east-1",
            access_key_id=minio.access_key,
            secret_access_key=SecretStr(minio.secret_key),
        )
        stack.servers["s3"] = f"{minio.url} (MinIO; key {minio.access_key})"
    else:
        stack.servers["s3"] = settings.endpoint_url or "the AWS SDK's default endpoint"
    stack.s3 = settings
    client = s3_client(settings)

    def ensure_bucket() -> None:
        try:
            client.head_bucket(Bucket=where.bucket)
        except ClientError:
            client.create_bucket(Bucket=where.bucket)

    try:
        await anyio.to_thread.run_sync(ensure_bucket)
    except (ClientError, BotoCoreError) as exc:
        raise RuntimeError(
            f"cannot use bucket {where.bucket} at {stack.servers['s3']}: {exc}"
        ) from exc


async def _run(stack: _Stack, stop: anyio.Event, client: httpx.AsyncClient, tally: _Tally) -> None:
    options, console = stack.options, stack.console
    # A handler's file lands a little after its roll age (it is written and committed
    # then), and samples come a little less often than PROGRESS_EVERY (the reads take
    # time): two sampling intervals more keep a whole roll in the window.
    rate = LandingRate(window=stack.roll_age + 2 * PROGRESS_EVERY)
    started = anyio.current_time()
    rate.add(started, (await anyio.to_thread.run_sync(tally.read)).landed)
    async with anyio.create_task_group() as tg:
        if options.simulator:
            generator = LoadGenerator(
                stack.gateway_url,
                LoadPlan(
                    messages=None,
                    projects=options.projects,
                    batch=max(1, min(50, int(options.rate // 20) or 1)),
                    concurrency=8,
                    rate=options.rate,
                    keep_ids=False,
                    idempotency_keys=True,
                ),
                api_key=stack.api_key,
            )
            tg.start_soon(generator.run, stop)
        if options.duration is not None:

            async def timer() -> None:
                await anyio.sleep(options.duration or 0)
                stop.set()

            tg.start_soon(timer)
        while True:
            with anyio.move_on_after(PROGRESS_EVERY):
                await stop.wait()
            if stop.is_set():  # the final line, once drained, says the rest
                break
            stack.check_children()
            counts = await anyio.to_thread.run_sync(tally.read)
            now = anyio.current_time()
            console.print(
                f"{now - started:6.0f} s  rate {rate.add(now, counts.landed):7.0f} msg/s  "
                f"accepted {counts.accepted:>9,}  landed {counts.landed:>9,}  "
                f"{await _pool(client, stack)}",
                highlight=False,
                soft_wrap=True,
            )
        tg.cancel_scope.cancel()


async def _pool(client: httpx.AsyncClient, stack: _Stack) -> str:
    for url in stack.status_urls:
        with contextlib.suppress(httpx.HTTPError, ValueError, KeyError, TypeError):
            doc = (await client.get(url)).json()
            leader = doc["leader"]["id"] if doc["leader"] else "none"
            return f"handlers {len(doc['members'])}  leader {leader}"
    return "status unavailable"
