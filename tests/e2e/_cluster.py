"""A harness that runs real shoal service processes against real nats-server and etcd.

    cluster = Cluster(backend_env=..., work_dir=tmp_path / "c")
    async with cluster:                        # stops every process on the way out
        gateway = await cluster.start_gateway()
        await cluster.start_leader("leader-a")
        await cluster.start_handlers("h1", "h2", "h3")
        cluster.kill("h1", signal.SIGKILL)
        doc = await cluster.wait_for(lambda s: "h1" not in member_ids(s), 15, "h1 gone")

Every process is ``python -m services.<role>`` in its own process group, its output in
``work_dir/logs/<name>.log`` (JSON lines: ``SHOAL_LOG_FORMAT=json``). Each Cluster has its
own etcd group, NATS stream, subject prefix and dead-letter stream, so clusters sharing
one nats-server and one etcd never see each other. Observation goes through the leader's
status API (``GET /status``): across processes there is no event to await, so
``wait_for`` polls it every ``STATUS_POLL`` seconds within a deadline, and ``status()``
itself keeps asking within ``STATUS_WITHIN`` (a request that times out, or a replica that
does not answer yet, is asked again), so one slow answer is never a failure. Every
status request's latency is kept (``status_requests``, ``status_latency``): the leaders
must answer each within a second under load.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import math
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Collection, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, Self

import anyio
import httpx
from aiokafka.admin import AIOKafkaAdminClient  # type: ignore[import-untyped, unused-ignore]

from adapters.s3 import S3Settings
from infra.local.servers import free_port

__all__ = [
    "STATUS_POLL",
    "STATUS_TIMEOUT",
    "STATUS_WITHIN",
    "CliResult",
    "Cluster",
    "ProcessExitedError",
    "ServiceProcess",
    "StatusDoc",
    "StatusRequest",
    "StatusUnavailableError",
    "member_ids",
    "owners",
    "partitions_of",
    "settled",
    "start_cluster",
]

REPO_ROOT = Path(__file__).resolve().parents[2]
STATUS_POLL = 0.15  # seconds between two status reads while waiting for a condition
STATUS_TIMEOUT = 5.0  # the bound on one GET /status (far above what a leader may take)
STATUS_WITHIN = 30.0  # status(): how long to keep asking before giving up
READY_POLL = 0.1
HOST = "127.0.0.1"
LEASE_TTL = 10.0  # the default: the acceptance figures are stated against it
ACK_WAIT = 5.0

Role = Literal["gateway", "leader", "handler"]
StatusDoc = dict[str, Any]

_live_groups: set[int] = set()


@atexit.register
def _kill_leftover_groups() -> None:
    """Last resort if a test process dies without stopping its clusters."""
    for pgid in list(_live_groups):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)


class StatusUnavailableError(RuntimeError):
    """No running leader replica answered ``GET /status``."""


class ProcessExitedError(RuntimeError):
    """A process that had to keep running exited; the message carries its log's tail."""


@dataclass
class ServiceProcess:
    """One started service process. ``spawned_at`` is the wall clock (``time.time()``)."""

    name: str
    role: Role
    popen: subprocess.Popen[bytes]
    log_path: Path
    port: int | None
    spawned_at: float
    stopped: bool = False  # SIGSTOP'd and not continued yet
    signals: list[tuple[float, str]] = field(default_factory=list)

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def url(self) -> str:
        if self.port is None:
            raise ValueError(f"{self.name} serves no HTTP port")
        return f"http://{HOST}:{self.port}"

    def running(self) -> bool:
        """Not exited (a SIGSTOP'd process is running but does not answer)."""
        return self.popen.poll() is None

    def tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError as exc:
            return f"(no log: {exc})"
        return "\n".join(text.splitlines()[-lines:])

    def log_events(self, msg: str | None = None) -> list[dict[str, Any]]:
        """The JSON log records of this process (optionally only those whose msg is ``msg``)."""
        events: list[dict[str, Any]] = []
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return events
        for line in lines:
            if not line.startswith("{"):
                continue
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict) and (msg is None or record.get("msg") == msg):
                events.append(record)
        return events


@dataclass(frozen=True, slots=True)
class StatusRequest:
    """One ``GET /status`` the harness made: which replica, when (wall clock), how long it
    took to answer (or to fail), and ``outcome``: the HTTP status code, ``timeout`` or
    ``error``."""

    leader: str
    at: float
    seconds: float
    outcome: str


# --- reading the status document ---------------------------------------------------------


def member_ids(doc: StatusDoc) -> set[str]:
    return {str(m["id"]) for m in doc["members"]}


def owners(doc: StatusDoc) -> dict[int, str | None]:
    """partition -> its single owner (None when unowned; a fan-out list is kept as-is)."""
    return {int(e["partition"]): e["owner"] for e in doc["partitions"]}


def partitions_of(doc: StatusDoc, member: str) -> set[int]:
    return {p for p, owner in owners(doc).items() if owner == member}


def settled(doc: StatusDoc, members: Collection[str]) -> bool:
    """Exactly ``members`` are live, a leader leads, the assignment gives partitions to each
    of them and to no one else, and every partition is held (claimed) by its owner: the
    handoff of the last generation is complete."""
    live = member_ids(doc)
    if doc.get("leader") is None or live != set(members):
        return False
    if set(owners(doc).values()) != live:
        return False
    return all(e["holder"] == e["owner"] for e in doc["partitions"])


# --- the cluster ---------------------------------------------------------------------------


@dataclass(frozen=True)
class CliResult:
    code: int
    out: str
    err: str


class Cluster:
    """Starts, signals and stops service processes of one isolated shoal group."""

    def __init__(
        self,
        *,
        backend_env: Callable[[str], Mapping[str, str]],
        work_dir: Path,
        partitions: int = 128,
        env: Mapping[str, str] | None = None,
        landing: str | None = None,
        s3: S3Settings | None = None,
        repo: Path = REPO_ROOT,
    ) -> None:
        """``landing``: the handlers' landing zone when not ``work_dir/data`` (an
        ``s3://bucket/prefix``; ``env`` then carries the SHOAL_S3_* settings for the
        processes, ``s3`` the same for this one). The gateway's ledger stays in
        ``data_dir/_ledger``. ``repo``: the checkout whose services run (the benchmark's
        baseline runs another one's)."""
        self.repo = repo
        suffix = uuid.uuid4().hex[:10]
        self.suffix = suffix
        self.group = f"e2e-{suffix}"
        self.partitions = partitions
        self.work_dir = work_dir
        self.data_dir = work_dir / "data"
        self.zone: str | Path = landing or self.data_dir
        self.s3 = s3
        self.extra_env = dict(env or {})
        self.log_dir = work_dir / "logs"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        base = {k: v for k, v in os.environ.items() if not k.startswith("SHOAL_")}
        self._env: dict[str, str] = {
            **base,
            "PYTHONUNBUFFERED": "1",
            "SHOAL_GROUP": self.group,
            "SHOAL_PARTITIONS": str(partitions),
            "SHOAL_LOG_FORMAT": "json",
            "SHOAL_LOG_LEVEL": "INFO",
            **backend_env(suffix),
            **(env or {}),
        }
        self._procs: dict[str, ServiceProcess] = {}
        # Settings for one process by name, over every other (a store reached via a proxy).
        self.process_env: dict[str, dict[str, str]] = {}
        # A command one process by name runs under (strace), its own command appended.
        self.process_wrapper: dict[str, list[str]] = {}
        self._http: httpx.AsyncClient | None = None
        self._preferred_status: str | None = None
        self.stop_problems: list[str] = []
        self.status_requests: list[StatusRequest] = []

    # -- lifecycle ------------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        self._http = httpx.AsyncClient(timeout=httpx.Timeout(5.0), trust_env=False)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(self.stop)
        finally:
            if self._http is not None:
                with anyio.CancelScope(shield=True):
                    await self._http.aclose()
                self._http = None

    @property
    def processes(self) -> dict[str, ServiceProcess]:
        return dict(self._procs)

    def process(self, name: str) -> ServiceProcess:
        return self._procs[name]

    def setting(self, name: str) -> str:
        """A SHOAL_* setting every process of the cluster gets (its stream's name...)."""
        return self._env[name]

    def _spawn(self, name: str, role: Role, port: int | None, env: Mapping[str, str]) -> None:
        old = self._procs.get(name)
        if old is not None and old.running():
            raise ValueError(f"{name} is already running (pid {old.pid})")
        log_path = self.log_dir / f"{name}.log"
        with log_path.open("ab") as log:
            popen = subprocess.Popen(
                [*self.process_wrapper.get(name, []), sys.executable, "-m", f"services.{role}"],
                cwd=self.repo,
                env={
                    **self._env,
                    "SHOAL_NATS_NAME": f"e2e-{name}",
                    **env,
                    **self.process_env.get(name, {}),
                },
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                process_group=0,  # its own group: signals reach it and only it
            )
        _live_groups.add(popen.pid)
        self._procs[name] = ServiceProcess(name, role, popen, log_path, port, time.time())

    async def start_gateway(
        self,
        name: str = "gateway",
        *,
        ready: bool = True,
        port: int | None = None,
        api_keys_file: Path | None = None,
    ) -> ServiceProcess:
        """``port``: the address a killed gateway had, so its clients find it again.
        ``api_keys_file``: the keys its requests need; without one the gateway takes any
        request (``SHOAL_GATEWAY_ALLOW_ANONYMOUS=true``: it listens on loopback only, and
        the suites that do not test access send no key)."""
        port = port or free_port()
        access = (
            {"SHOAL_GATEWAY_ALLOW_ANONYMOUS": "true"}
            if api_keys_file is None
            else {"SHOAL_GATEWAY_API_KEYS_FILE": str(api_keys_file)}
        )
        self._spawn(
            name,
            "gateway",
            port,
            {
                "SHOAL_GATEWAY_ID": name,
                "SHOAL_GATEWAY_HOST": HOST,
                "SHOAL_GATEWAY_PORT": str(port),
                "SHOAL_GATEWAY_LEDGER_DIR": str(self.data_dir / "_ledger"),
                **access,
            },
        )
        if ready:
            await self.wait_ready(name)
        return self._procs[name]

    async def start_leader(self, name: str, *, ready: bool = True) -> ServiceProcess:
        port = free_port()
        self._spawn(
            name,
            "leader",
            port,
            {
                "SHOAL_LEADER_ID": name,
                "SHOAL_LEADER_HOST": HOST,
                "SHOAL_LEADER_PORT": str(port),
                "SHOAL_LEADER_LEASE_TTL": str(LEASE_TTL),
                "SHOAL_LEADER_DATA_DIR": str(self.zone),
            },
        )
        if ready:
            await self.wait_ready(name)
        return self._procs[name]

    async def start_handler(
        self, name: str, *, ready: bool = True, env: Mapping[str, str] | None = None
    ) -> ServiceProcess:
        """Start a handler (``env``: more SHOAL_HANDLER_* settings); ready when it appears
        in the status document's members."""
        self._spawn(
            name,
            "handler",
            None,
            {
                "SHOAL_HANDLER_ID": name,
                "SHOAL_HANDLER_DATA_DIR": str(self.zone),
                "SHOAL_HANDLER_LEASE_TTL": str(LEASE_TTL),
                **(env or {}),
            },
        )
        if ready:
            await self.wait_ready(name)
        return self._procs[name]

    async def start_handlers(self, *names: str) -> list[ServiceProcess]:
        """Start several handlers at once; ready when all are members."""
        for name in names:
            await self.start_handler(name, ready=False)
        wanted = set(names)
        await self.wait_for(lambda d: wanted <= member_ids(d), 30.0, f"{sorted(wanted)} join")
        return [self._procs[n] for n in names]

    async def wait_ready(self, name: str, within: float = 30.0) -> None:
        """gateway: /readyz is 200; leader: /healthz is 200; handler: it is a member."""
        role = self._procs[name].role
        if role == "gateway":
            await self._wait_http(name, "/readyz", within)
        elif role == "leader":
            await self._wait_http(name, "/healthz", within)
        else:
            await self.wait_for(lambda d: name in member_ids(d), within, f"{name} joins")

    def kill(self, name: str, sig: signal.Signals) -> float:
        """Send ``sig`` to the process group of ``name``; returns the wall clock just before."""
        proc = self._procs[name]
        at = time.time()
        os.killpg(proc.pid, sig)
        proc.signals.append((at, sig.name))
        if sig is signal.SIGSTOP:
            proc.stopped = True
        elif sig is signal.SIGCONT:
            proc.stopped = False
        return at

    async def wait_exit(self, name: str, within: float) -> int:
        """The exit status of ``name`` (negative: killed by that signal) within ``within`` s.
        Raises ``TimeoutError`` if it is still running then."""
        popen = self._procs[name].popen
        try:
            return await anyio.to_thread.run_sync(popen.wait, within)
        except subprocess.TimeoutExpired:
            raise TimeoutError(f"{name} did not exit within {within} s") from None

    def stop(self, grace: float = 20.0) -> None:
        """SIGTERM everything still running (SIGCONT first if stopped), SIGKILL after
        ``grace``, reap, and assert that no process group of this cluster is left.
        Exits other than 0 after SIGTERM are collected in ``stop_problems``. Idempotent."""
        live = [p for p in self._procs.values() if p.running()]
        for proc in live:
            _signal_group(proc.pid, signal.SIGTERM)
            if proc.stopped:
                _signal_group(proc.pid, signal.SIGCONT)
                proc.stopped = False
        deadline = time.monotonic() + grace
        for proc in live:
            try:
                code = proc.popen.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.stop_problems.append(
                    f"{proc.name} did not exit within {grace:g} s of SIGTERM: SIGKILL"
                )
                _signal_group(proc.pid, signal.SIGKILL)
                proc.popen.wait(timeout=10.0)
                continue
            if code != 0:
                self.stop_problems.append(f"{proc.name} exited with {code} after SIGTERM")
        left = []
        for proc in self._procs.values():
            if proc.running():
                _signal_group(proc.pid, signal.SIGKILL)
                proc.popen.wait(timeout=10.0)
            if _group_alive(proc.pid):
                left.append(proc.name)
            else:
                _live_groups.discard(proc.pid)
        assert not left, f"processes of cluster {self.group} still alive after stop: {left}"

    def dump_logs(self, lines: int = 60) -> str:
        parts = []
        for proc in self._procs.values():
            state = "running" if proc.running() else f"exit {proc.popen.returncode}"
            parts.append(
                f"----- {proc.name} ({proc.role}, pid {proc.pid}, {state}, "
                f"signals {proc.signals}) {proc.log_path} -----\n{proc.tail(lines)}"
            )
        return "\n".join(parts)

    # -- observation ----------------------------------------------------------------------

    def _client(self) -> httpx.AsyncClient:
        if self._http is None:
            raise RuntimeError("use the Cluster as `async with cluster:`")
        return self._http

    async def _wait_http(self, name: str, path: str, within: float) -> None:
        proc = self._procs[name]
        url = proc.url + path
        last = "no answer"
        with anyio.move_on_after(within):
            while True:
                if not proc.running():
                    raise RuntimeError(
                        f"{name} exited with {proc.popen.returncode} before {path} answered\n"
                        f"{proc.tail()}"
                    )
                try:
                    response = await self._client().get(url, timeout=2.0)
                    if response.status_code == 200:
                        return
                    last = f"{response.status_code} {response.text[:200]}"
                except httpx.HTTPError as exc:
                    last = repr(exc)
                await anyio.sleep(READY_POLL)
        raise TimeoutError(f"{name}: {path} not 200 within {within} s ({last})\n{proc.tail()}")

    def _status_sources(self) -> list[ServiceProcess]:
        leaders = [
            p for p in self._procs.values() if p.role == "leader" and p.running() and not p.stopped
        ]
        leaders.sort(key=lambda p: p.name != self._preferred_status)
        return leaders

    async def _get_status(self, proc: ServiceProcess) -> httpx.Response:
        """One ``GET /status`` of ``proc``, its latency kept in ``status_requests``."""
        at, started = time.time(), time.perf_counter()

        def took(outcome: str) -> None:  # not when cancelled: that request had no end
            seconds = time.perf_counter() - started
            self.status_requests.append(StatusRequest(proc.name, at, seconds, outcome))

        try:
            response = await self._client().get(proc.url + "/status", timeout=STATUS_TIMEOUT)
        except httpx.TimeoutException:
            took("timeout")
            raise
        except httpx.HTTPError:
            took("error")
            raise
        took(str(response.status_code))
        return response

    async def _status_once(self) -> StatusDoc:
        """One round: each running replica in turn (the active one first, if known) until
        one answers. Raises ``StatusUnavailableError`` naming why each did not."""
        errors = []
        for proc in self._status_sources():
            try:
                response = await self._get_status(proc)
            except httpx.HTTPError as exc:
                errors.append(f"{proc.name}: {exc!r}")
                continue
            if response.status_code != 200:
                errors.append(f"{proc.name}: {response.status_code} {response.text[:200]}")
                continue
            doc: StatusDoc = response.json()
            leader = doc.get("leader")
            self._preferred_status = leader["id"] if leader else None
            return doc
        raise StatusUnavailableError("; ".join(errors) or "no leader process is running")

    async def status(self, within: float = STATUS_WITHIN) -> StatusDoc:
        """The status document from a running leader replica (the active one if known:
        only it has the ``rebalances`` history), asking again every ``STATUS_POLL`` s while
        none answers (timeouts, refused connections, a replica not serving yet), for at
        most ``within`` seconds. Raises ``StatusUnavailableError`` with the last errors."""
        error = "not asked"
        with anyio.move_on_after(within):
            while True:
                try:
                    return await self._status_once()
                except StatusUnavailableError as exc:
                    error = str(exc)
                await anyio.sleep(STATUS_POLL)
        raise StatusUnavailableError(f"no leader replica answered within {within:g} s: {error}")

    def status_latency(self) -> dict[str, Any]:
        """``requests``, ``p50_ms``, ``p99_ms``, ``max_ms`` (nearest rank), ``outcomes``
        (count by HTTP status, ``timeout``, ``error``) and ``slowest`` (the three slowest:
        replica, outcome, milliseconds, seconds after the first request) of every status
        request made so far; a request that timed out counts with the time it waited, one
        refused (a killed replica) with the little it took."""
        seconds = sorted(r.seconds for r in self.status_requests)
        if not seconds:
            return {"requests": 0, "p50_ms": None, "p99_ms": None, "max_ms": None}

        def rank(q: float) -> float:
            return round(seconds[max(0, math.ceil(q * len(seconds)) - 1)] * 1000, 1)

        first = self.status_requests[0].at
        slowest = sorted(self.status_requests, key=lambda r: r.seconds)[-3:]
        return {
            "requests": len(seconds),
            "p50_ms": rank(0.50),
            "p99_ms": rank(0.99),
            "max_ms": rank(1.0),
            "outcomes": dict(sorted(Counter(r.outcome for r in self.status_requests).items())),
            "slowest": [
                f"{r.leader}:{r.outcome}:{r.seconds * 1000:.0f}ms@+{r.at - first:.1f}s"
                for r in reversed(slowest)
            ],
        }

    async def active_leader(self) -> tuple[str, int] | None:
        """(leader id, term) from the status document, None while nobody leads."""
        leader = (await self.status()).get("leader")
        return None if leader is None else (str(leader["id"]), int(leader["term"]))

    async def cli(self, *args: str) -> CliResult:
        """``shoal ARGS`` in a subprocess with this cluster's settings (and no ``shoal up``
        stack to fall back on), as an operator would run it."""
        done = await anyio.run_process(
            [sys.executable, "-m", "services.cli.main", *args],
            cwd=self.repo,
            env={**self._env, "SHOAL_STATE_DIR": str(self.work_dir / "state")},
            check=False,
        )
        return CliResult(done.returncode, done.stdout.decode(), done.stderr.decode())

    def settings_env(self) -> dict[str, str]:
        """The SHOAL_* settings this cluster's processes run with."""
        return {k: v for k, v in self._env.items() if k.startswith("SHOAL_")}

    async def wait_for(
        self,
        predicate: Callable[[StatusDoc], bool],
        within: float,
        what: str,
        *,
        running: Collection[str] = (),
    ) -> StatusDoc:
        """The first status document satisfying ``predicate``, polled every STATUS_POLL s
        for at most ``within`` seconds. Raises ``TimeoutError`` naming ``what`` and the
        last document's summary, or ``ProcessExitedError`` as soon as one of the processes
        named in ``running`` has exited."""
        last: StatusDoc | None = None
        error = ""
        with anyio.move_on_after(within):
            while True:
                for name in running:
                    proc = self._procs[name]
                    if not proc.running():
                        raise ProcessExitedError(
                            f"{name} exited with {proc.popen.returncode} while waiting for: "
                            f"{what}\n{proc.tail(60)}"
                        )
                try:
                    last = await self._status_once()
                except (StatusUnavailableError, ValueError) as exc:
                    error = str(exc)
                else:
                    if predicate(last):
                        return last
                await anyio.sleep(STATUS_POLL)
        raise TimeoutError(
            f"not within {within} s: {what}; last status: {summarize(last)} {error}".rstrip()
        )

    async def record_status(
        self, history: list[tuple[float, StatusDoc]], interval: float = STATUS_POLL
    ) -> None:
        """Append (wall clock, document) every ``interval`` until cancelled."""
        while True:
            try:
                doc = await self._status_once()
            except (StatusUnavailableError, ValueError):
                pass
            else:
                history.append((time.time(), doc))
            await anyio.sleep(interval)


async def start_cluster(
    cluster: Cluster, leaders: tuple[str, ...], handlers: tuple[str, ...]
) -> StatusDoc:
    """Spawn everything at once, then wait until each is ready and the assignment settled."""
    await cluster.start_gateway(ready=False)
    for name in leaders:
        await cluster.start_leader(name, ready=False)
    for name in handlers:
        await cluster.start_handler(name, ready=False)
    for name in ("gateway", *leaders):
        await cluster.wait_ready(name, within=60.0)
    return await cluster.wait_for(
        lambda d: settled(d, handlers), 60.0, f"{handlers} own and hold every partition"
    )


def summarize(doc: StatusDoc | None) -> str:
    if doc is None:
        return "none"
    counts: dict[str, int] = {}
    unheld = 0
    for entry in doc["partitions"]:
        key = str(entry["owner"])
        counts[key] = counts.get(key, 0) + 1
        unheld += entry["holder"] != entry["owner"]
    return (
        f"leader={doc.get('leader')} generation={doc.get('generation')} "
        f"members={sorted(member_ids(doc))} owners={counts} not-held-by-owner={unheld}"
    )


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, sig)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def delete_cluster_topics(bootstrap: str, suffix: str) -> None:
    """Delete every Kafka topic whose name carries a cluster's suffix (its data, dead-letter,
    registration, coordination and idempotency topics)."""

    async def delete() -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await admin.start()
        try:
            names = [t for t in await admin.list_topics() if suffix in t]
            if names:
                await admin.delete_topics(names)
        finally:
            await admin.close()

    # A fixture's teardown runs beside the test runner's event loop: a thread of its own.
    with ThreadPoolExecutor(max_workers=1) as pool:
        pool.submit(anyio.run, delete).result(timeout=60.0)
