"""Handles of running servers (frozen dataclasses) and the start/retry loop behind them."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Generic, TypeVar

from infra.local._process import (
    ManagedProcess,
    ServerStartError,
    http_get,
    http_json,
    log_tail,
    make_temp_dir,
    remove_dir,
    tcp_greeting,
    wait_ready,
)

HOST = "127.0.0.1"
_START_ATTEMPTS = 3  # fresh ports when another process grabbed one between free_port() and bind


@dataclass(frozen=True, kw_only=True)
class RunningServer:
    """Handle of one server process. The handle is frozen; restart() respawns it in place."""

    kind: ClassVar[str] = "server"
    # How long a restart may take to answer again: a ceiling, not a wait.
    restart_timeout: ClassVar[float] = 30.0
    name: str
    data_dir: Path
    keep: bool  # when False, stop() removes data_dir
    port: int  # the client port
    _proc: ManagedProcess = field(repr=False, compare=False)

    @property
    def endpoint(self) -> str:
        """host:port of the client port."""
        return f"{HOST}:{self.port}"

    @property
    def url(self) -> str:
        raise NotImplementedError

    @property
    def pid(self) -> int | None:
        """PID of the running server, None when it is not running."""
        return self._proc.pid

    @property
    def log_path(self) -> Path:
        return self._proc.log_path

    def running(self) -> bool:
        return self._proc.running()

    def log_tail(self, lines: int = 30) -> str:
        return log_tail(self.log_path, lines)

    def ready(self) -> bool:
        """One readiness probe, no waiting."""
        raise NotImplementedError

    def wait_ready(self, timeout: float = 30.0) -> None:
        wait_ready(self._proc, self.ready, what=f"{self.kind} {self.name}", timeout=timeout)

    def stop(self, timeout: float = 10.0, *, remove_data: bool | None = None) -> None:
        """SIGTERM, then SIGKILL after timeout; removes data_dir unless keep (or remove_data)."""
        self._proc.stop(timeout)
        if (not self.keep) if remove_data is None else remove_data:
            remove_dir(self.data_dir)

    def kill(self) -> None:
        """SIGKILL (a crash, for fault tests); data stays for restart()."""
        self._proc.kill()

    def restart(self, timeout: float | None = None) -> None:
        """Stop if running (SIGTERM) and start again on the same ports and data dir."""
        if not self.data_dir.is_dir():
            raise RuntimeError(f"{self.data_dir} was removed by stop(); cannot restart")
        self._proc.stop()
        self._proc.spawn()
        self.wait_ready(self.restart_timeout if timeout is None else timeout)


@dataclass(frozen=True, kw_only=True)
class RunningNats(RunningServer):
    kind: ClassVar[str] = "nats-server"
    monitor_port: int
    cluster_port: int | None = None
    jetstream: bool = True

    @property
    def url(self) -> str:
        return f"nats://{HOST}:{self.port}"

    @property
    def monitor_url(self) -> str:
        return f"http://{HOST}:{self.monitor_port}"

    def ready(self) -> bool:
        # Full /healthz: JetStream enabled and, in a cluster, the meta leader known.
        got = http_get(f"{self.monitor_url}/healthz", timeout=1.0)
        return got is not None and got[0] == 200 and tcp_greeting(self.port, b"", b"INFO")


@dataclass(frozen=True, kw_only=True)
class RunningEtcd(RunningServer):
    kind: ClassVar[str] = "etcd"
    peer_port: int

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def peer_url(self) -> str:
        return f"http://{HOST}:{self.peer_port}"

    def ready(self) -> bool:
        body = http_json(f"{self.url}/health", timeout=1.0)
        return isinstance(body, dict) and body.get("health") == "true"


@dataclass(frozen=True, kw_only=True)
class RunningRedis(RunningServer):
    kind: ClassVar[str] = "redis-server"

    @property
    def url(self) -> str:
        return f"redis://{HOST}:{self.port}"

    def ready(self) -> bool:
        # a server that wants a password answers NOAUTH: up all the same
        return tcp_greeting(self.port, b"PING\r\n", (b"+PONG", b"-NOAUTH"))


@dataclass(frozen=True, kw_only=True)
class RunningMinio(RunningServer):
    """MinIO: ``url`` is the S3 endpoint; ``access_key`` / ``secret_key`` its root user."""

    kind: ClassVar[str] = "minio"
    access_key: str
    secret_key: str

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def ready(self) -> bool:
        answer = http_get(f"{self.url}/minio/health/live")
        return answer is not None and answer[0] == 200

    def s3_env(self) -> dict[str, str]:
        """The SHOAL_S3_* settings that point shoal at this server."""
        return {
            "SHOAL_S3_ENDPOINT_URL": self.url,
            "SHOAL_S3_REGION": "us-east-1",
            "SHOAL_S3_ACCESS_KEY_ID": self.access_key,
            "SHOAL_S3_SECRET_ACCESS_KEY": self.secret_key,
        }


S = TypeVar("S", bound=RunningServer)


@dataclass(frozen=True, kw_only=True)
class _Cluster(Generic[S]):
    kill_when_discarding: ClassVar[bool] = False
    servers: tuple[S, ...]
    data_dir: Path
    keep: bool

    @property
    def endpoints(self) -> tuple[str, ...]:
        return tuple(s.endpoint for s in self.servers)

    @property
    def urls(self) -> tuple[str, ...]:
        return tuple(s.url for s in self.servers)

    def wait_ready(self, timeout: float = 30.0) -> None:
        for s in self.servers:
            s.wait_ready(timeout)

    def leader(self) -> S | None:
        raise NotImplementedError

    def stop(self, timeout: float = 10.0, *, remove_data: bool | None = None) -> None:
        """Stop every member, the leader last; removes data_dir unless keep (or remove_data)."""
        remove = (not self.keep) if remove_data is None else remove_data
        if remove and self.kill_when_discarding:
            for s in self.servers:
                s.kill()
        else:
            leader = self.leader()
            for s in sorted(self.servers, key=lambda s: s is leader):
                s.stop(timeout, remove_data=False)
        if remove:
            remove_dir(self.data_dir)


@dataclass(frozen=True, kw_only=True)
class NatsCluster(_Cluster[RunningNats]):
    @property
    def url(self) -> str:
        """Comma-separated, as NATS tools and SHOAL_* settings take it."""
        return ",".join(self.urls)

    def leader(self) -> RunningNats | None:
        return self.meta_leader()

    def meta_leader(self) -> RunningNats | None:
        """The server that is the JetStream meta leader now, as its peers see it."""
        for s in self.servers:
            body = http_json(f"{s.monitor_url}/jsz", timeout=1.0)
            meta = body.get("meta_cluster") if isinstance(body, dict) else None
            leader = meta.get("leader") if isinstance(meta, dict) else None
            for cand in self.servers:
                if cand.name == leader:
                    return cand
        return None


@dataclass(frozen=True, kw_only=True)
class EtcdCluster(_Cluster[RunningEtcd]):
    # A leader that gets SIGTERM tries to hand leadership to a peer it still believes
    # alive and waits up to 7 s (etcd 3.4: "leader transfer took too long") when that peer
    # has just stopped; stopping the leader last does not always avoid it. When the data
    # is thrown away anyway, stop() kills the members (etcd is crash-safe by design).
    kill_when_discarding: ClassVar[bool] = True

    def leader(self) -> RunningEtcd | None:
        """The member that is the raft leader now, as the running members report it."""
        ids: dict[str, RunningEtcd] = {}
        leader_id = None
        for s in self.servers:
            if not s.running():
                continue
            body = http_json(f"{s.url}/v3/maintenance/status", timeout=1.0, post=b"{}")
            if isinstance(body, dict) and isinstance(body.get("header"), dict):
                ids[str(body["header"].get("member_id"))] = s
                leader_id = str(body.get("leader")) if body.get("leader") else leader_id
        return ids.get(leader_id) if leader_id else None


def own_dir(data_dir: Path | None, prefix: str, keep: bool) -> tuple[Path, bool]:
    """(directory, keep): a temporary directory unless given; a given one is always kept."""
    if data_dir is not None:
        data_dir.mkdir(parents=True, exist_ok=True)
        return data_dir.resolve(), True
    return make_temp_dir(prefix, remove_at_exit=not keep), keep


def launch(build: Callable[[], Sequence[S]], root: Path, keep: bool, timeout: float) -> list[S]:
    """Spawn what build() describes and wait until all are ready; retry on a port clash."""
    try:
        for attempt in range(_START_ATTEMPTS):
            servers = list(build())
            try:
                for s in servers:
                    s._proc.spawn()
                for s in servers:
                    s.wait_ready(timeout)
            except BaseException as exc:
                for s in servers:
                    s.kill()
                if (
                    isinstance(exc, ServerStartError)
                    and exc.port_in_use
                    and attempt < _START_ATTEMPTS - 1
                ):
                    continue
                raise
            return servers
    except BaseException:
        if not keep:
            remove_dir(root)
        raise
    raise AssertionError("unreachable")
