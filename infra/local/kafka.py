"""Run a real Apache Kafka broker (KRaft, no ZooKeeper, no Docker) from Maven Central jars.

    with ServerGroup() as group:
        kafka = group.start(start_kafka)        # kafka.bootstrap == "127.0.0.1:PORT"
        kafka.kill(); kafka.restart()           # crash and come back: same ports, same data
        cluster = group.start(start_kafka_cluster, 3)   # cluster.bootstrap: "h:p,h:p,h:p"

Jars: ``python -m infra.local.kafka fetch`` (or infra/local/install.sh) copies Kafka's
runtime jars into ``${SHOAL_CACHE:-~/.cache/shoal}/kafka/<version>/libs`` once (see
``_kafka_dist`` for the recipe that was verified). Java >= 17 runs them.

Each node runs in combined mode (``process.roles=broker,controller``) with a static quorum
(``controller.quorum.voters``): its storage is formatted with a generated cluster id, then
``java ... kafka.Kafka server.properties`` is started directly (no shell), so the PID we
signal is the JVM's. Ready when the broker answers a Metadata request listing itself (and,
in a cluster, every node) and an active controller (``_kafka_probe``). The error on a
failed start carries the tail of the node's log.

Measured on the 2-vCPU machine (Kafka 4.1.2, OpenJDK 17): format about 1.1 s; start
to ready about 4 s (single node), see tests/infra/test_kafka_server.py.
"""

from __future__ import annotations

import base64
import shlex
import shutil
import subprocess
import sys
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from infra.local._handles import HOST, RunningServer, _Cluster, launch, own_dir
from infra.local._kafka_dist import (
    KAFKA_VERSION,
    fetch_kafka,
    find_java,
    kafka_libs,
)
from infra.local._kafka_probe import metadata
from infra.local._process import ManagedProcess, ServerStartError, free_port
from infra.local._tls import TestPki, make_test_pki, openssl_available

__all__ = [
    "KAFKA_VERSION",
    "KafkaCluster",
    "RunningKafka",
    "fetch_kafka",
    "find_java",
    "kafka_libs",
    "new_cluster_id",
    "start_kafka",
    "start_kafka_cluster",
]

# The broker settings of notes/kafka-from-maven.md, all verified: one offsets partition and
# no initial rebalance delay make consumer groups start at once; the log cleaner's dedupe
# buffer (128 MiB by default, allocated at start) is cut so a 512 MiB heap suffices.
# Found here: after a kill -9 the restarted node's broker cannot register until the dead
# incarnation's session expires ("Unable to register broker 1 because the controller
# returned error DUPLICATE_BROKER_REGISTRATION", every 2 s), which with the default
# broker.session.timeout.ms=9000 made a restart take 12 s; 3 s (heartbeat 0.5 s) -> ~6 s.
# Topics are created by their users with the right partition count: a producer must not
# auto-create a missing (deleted) topic with num.partitions=1.
_BASE_CONFIG = {
    "auto.create.topics.enable": "false",
    "broker.session.timeout.ms": "3000",
    "broker.heartbeat.interval.ms": "500",
    "inter.broker.listener.name": "PLAINTEXT",
    "controller.listener.names": "CONTROLLER",
    "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
    "offsets.topic.num.partitions": "1",
    # Likewise one transaction-state partition, not 50: a fresh broker created all 50 on
    # the first transactional commit (shoal's Kafka commits are transactions), and a
    # restarted one loaded all 50 before it answered.
    "transaction.state.log.num.partitions": "1",
    "group.initial.rebalance.delay.ms": "0",
    "log.cleaner.dedupe.buffer.size": "16777216",
    "num.network.threads": "2",
    "num.io.threads": "4",
    "num.recovery.threads.per.data.dir": "2",
    # A deleted topic's logs go at once, not after a minute: the test suites delete theirs,
    # and a restart recovers only the logs still on disk.
    "file.delete.delay.ms": "1000",
}

# A log4j2 properties file (Kafka 4 logs through log4j2; properties need no YAML jar).
# AbstractConfig's dumps of every setting (hundreds of lines per client) are cut.
_LOG4J2 = """\
status = warn
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = OUT
logger.config.name = org.apache.kafka.common.config.AbstractConfig
logger.config.level = WARN
logger.state.name = state.change.logger
logger.state.level = WARN
logger.request.name = kafka.request.logger
logger.request.level = WARN
logger.utils.name = org.apache.kafka.common.utils.AppInfoParser
logger.utils.level = WARN
"""

# Kafka's own launcher flags (bin/kafka-run-class.sh), with a small heap.
_JVM_FLAGS = (
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
    "-XX:+ExitOnOutOfMemoryError",
    "-Djava.awt.headless=true",
)

_FORMAT_TIMEOUT = 120.0


# A node started with secured=True (the test session's) also listens for SASL_PLAINTEXT
# (mechanisms PLAIN and SCRAM-SHA-256) on its own port, and for SASL_SSL on another when the
# openssl CLI is there to make a certificate (CA in RunningKafka.tls_ca_file), with one user:
# tests connect through them with and without the right password (credentials of a loopback
# test broker, not a secret). The PLAINTEXT listener stays what every other client uses.
# Off by default: on this machine the extra listeners cost the PLAINTEXT clients about a
# sixth of shoal's Kafka throughput (bench: 5,356-5,744 msg/s with them, 6,529 without).
SASL_USER = "shoal"
SASL_PASSWORD = "shoal-local-sasl"


def _sasl_config(listener: str) -> dict[str, str]:
    return {
        f"listener.name.{listener}.plain.sasl.jaas.config": (
            "org.apache.kafka.common.security.plain.PlainLoginModule required "
            f'user_{SASL_USER}="{SASL_PASSWORD}";'
        ),
        f"listener.name.{listener}.scram-sha-256.sasl.jaas.config": (
            "org.apache.kafka.common.security.scram.ScramLoginModule required;"
        ),
    }


def _tls_config(listener: str, pki: TestPki) -> dict[str, str]:
    """A PEM key store and trust store given inline (the key is unencrypted PKCS#8)."""
    return {
        f"listener.name.{listener}.ssl.keystore.type": "PEM",
        f"listener.name.{listener}.ssl.keystore.certificate.chain": pki.server_cert.read_text(),
        f"listener.name.{listener}.ssl.keystore.key": pki.server_key.read_text(),
        f"listener.name.{listener}.ssl.truststore.type": "PEM",
        f"listener.name.{listener}.ssl.truststore.certificates": pki.ca.read_text(),
    }


def new_cluster_id() -> str:
    """A Kafka cluster id: a random Uuid in base64url without padding (22 characters)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


@dataclass(frozen=True, kw_only=True)
class RunningKafka(RunningServer):
    kind: ClassVar[str] = "kafka"
    node_id: int
    controller_port: int
    cluster_id: str
    cluster_size: int = 1
    sasl_port: int | None = None  # SASL_PLAINTEXT, PLAIN: SASL_USER / SASL_PASSWORD
    sasl_ssl_port: int | None = None  # SASL_SSL (same user), when openssl made certificates
    tls_ca_file: Path | None = None  # the CA that signed the SASL_SSL listener's certificate

    @property
    def bootstrap(self) -> str:
        """host:port of the broker listener, what Kafka clients take."""
        return self.endpoint

    @property
    def sasl_bootstrap(self) -> str | None:
        """host:port of the SASL_PLAINTEXT listener (user ``SASL_USER``), if any."""
        return None if self.sasl_port is None else f"{HOST}:{self.sasl_port}"

    @property
    def sasl_ssl_bootstrap(self) -> str | None:
        """host:port of the SASL_SSL listener (``tls_ca_file`` verifies it), if any."""
        return None if self.sasl_ssl_port is None else f"{HOST}:{self.sasl_ssl_port}"

    @property
    def url(self) -> str:
        # Kafka has no URL scheme: the bootstrap string is what every client takes.
        return self.bootstrap

    # After a kill -9 the broker recovers every log before it answers: the shared test
    # broker holds hundreds (CI's contract tier: 518 logs, more than 30 s beside the unit
    # tier).
    restart_timeout: ClassVar[float] = 120.0

    def ready(self) -> bool:
        view = metadata(HOST, self.port, timeout=1.0)
        return (
            view is not None
            and self.node_id in view.brokers
            and view.controller_id >= 0
            and len(view.brokers) >= self.cluster_size
        )


@dataclass(frozen=True, kw_only=True)
class KafkaCluster(_Cluster[RunningKafka]):
    # Stopping the nodes one by one, the last ones lose the quorum and their controlled
    # shutdown waits for a controller until SIGKILL. When the data is thrown away anyway,
    # stop() kills them (a kill -9 is what Kafka's log recovery is built for).
    kill_when_discarding: ClassVar[bool] = True

    @property
    def bootstrap(self) -> str:
        return ",".join(self.endpoints)

    @property
    def url(self) -> str:
        return self.bootstrap

    def leader(self) -> RunningKafka | None:
        """The active controller, as the first node that answers reports it."""
        for s in self.servers:
            if not s.running():
                continue
            view = metadata(HOST, s.port, timeout=1.0)
            if view is not None:
                return next((c for c in self.servers if c.node_id == view.controller_id), None)
        return None


def _properties(values: Mapping[str, str]) -> str:
    lines = ["# written by infra.local.kafka"]
    for key, value in values.items():
        escaped = value.replace("\\", "\\\\").replace("\n", "\\n")
        lines.append(f"{key}={escaped}")
    return "\n".join(lines) + "\n"


def _node_config(
    *,
    node_id: int,
    port: int,
    controller_port: int,
    sasl_port: int | None,
    voters: str,
    log_dir: Path,
    replication: int,
    extra: Mapping[str, str],
    sasl_ssl: tuple[int, TestPki] | None = None,
) -> dict[str, str]:
    plain = f"PLAINTEXT://{HOST}:{port}"
    secured: list[str] = []
    protocols = _BASE_CONFIG["listener.security.protocol.map"]
    security: dict[str, str] = {}
    if sasl_port is not None:
        secured.append(f"SASL_PLAINTEXT://{HOST}:{sasl_port}")
        protocols += ",SASL_PLAINTEXT:SASL_PLAINTEXT"
        security = {"sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256"}
        security |= _sasl_config("sasl_plaintext")
    if sasl_ssl is not None:
        ssl_port, pki = sasl_ssl
        secured.append(f"SASL_SSL://{HOST}:{ssl_port}")
        protocols += ",SASL_SSL:SASL_SSL"
        security |= _sasl_config("sasl_ssl") | _tls_config("sasl_ssl", pki)
    config = {
        "process.roles": "broker,controller",
        "node.id": str(node_id),
        "controller.quorum.voters": voters,
        "listeners": ",".join([plain, f"CONTROLLER://{HOST}:{controller_port}", *secured]),
        "advertised.listeners": ",".join([plain, *secured]),
        "log.dirs": str(log_dir),
        **_BASE_CONFIG,
        "listener.security.protocol.map": protocols,
        **security,
        "offsets.topic.replication.factor": str(replication),
        "transaction.state.log.replication.factor": str(replication),
        "transaction.state.log.min.isr": str(min(2, replication)),
        "share.coordinator.state.topic.replication.factor": str(replication),
        "share.coordinator.state.topic.min.isr": str(min(2, replication)),
    }
    config.update(extra)
    return config


def _format(java: Path, libs: Path, node_dir: Path, cluster_id: str) -> None:
    """Format the node's log dir (once: an already formatted dir is left alone)."""
    if (node_dir / "data" / "meta.properties").is_file():
        return
    argv = [
        str(java),
        "-Xmx256m",
        f"-Dlog4j2.configurationFile={node_dir / 'log4j2.properties'}",
        "-cp",
        f"{libs}/*",
        "kafka.tools.StorageTool",
        "format",
        # One token: an id may start with "-", which argparse would take for an option.
        f"--cluster-id={cluster_id}",
        "-c",
        str(node_dir / "server.properties"),
        # the SASL listener's SCRAM user (KRaft keeps SCRAM credentials in its metadata)
        f"--add-scram=SCRAM-SHA-256=[name={SASL_USER},password={SASL_PASSWORD}]",
    ]
    log = node_dir / "format.log"
    try:
        with log.open("wb") as out:
            done = subprocess.run(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=node_dir,
                timeout=_FORMAT_TIMEOUT,
                check=False,
            )
    except subprocess.TimeoutExpired:
        raise ServerStartError(
            f"kafka storage format did not finish in {_FORMAT_TIMEOUT:.0f} s: {shlex.join(argv)}"
        ) from None
    if done.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
        raise ServerStartError(
            f"kafka storage format failed (exit {done.returncode})\n"
            f"  command: {shlex.join(argv)}\n  output:\n"
            + "\n".join("    " + line for line in tail.splitlines())
        )


def _kafka_node(
    java: Path,
    libs: Path,
    node_dir: Path,
    *,
    name: str,
    keep: bool,
    node_id: int,
    ports: tuple[int, int, int, int],
    voters: str,
    cluster_id: str,
    cluster_size: int,
    heap: tuple[str, str],
    config: Mapping[str, str],
    jvm_args: Sequence[str],
    secured: bool,
) -> RunningKafka:
    port, controller_port, sasl_port, ssl_port = ports
    # A SASL_SSL listener too when openssl can make its certificate (kept across restarts)
    pki = make_test_pki(node_dir / "tls") if secured and openssl_available() else None
    sasl_ssl = None if pki is None else (ssl_port, pki)
    (node_dir / "server.properties").write_text(
        _properties(
            _node_config(
                node_id=node_id,
                port=port,
                controller_port=controller_port,
                sasl_port=sasl_port if secured else None,
                sasl_ssl=sasl_ssl,
                voters=voters,
                log_dir=node_dir / "data",
                replication=min(3, cluster_size),
                extra=config,
            )
        )
    )
    (node_dir / "log4j2.properties").write_text(_LOG4J2)
    argv = [
        str(java),
        f"-Xms{heap[0]}",
        f"-Xmx{heap[1]}",
        *_JVM_FLAGS,
        f"-Dlog4j2.configurationFile={node_dir / 'log4j2.properties'}",
        *jvm_args,
        "-cp",
        f"{libs}/*",  # the JVM expands dir/* itself (no shell involved)
        "kafka.Kafka",
        str(node_dir / "server.properties"),
    ]
    proc = ManagedProcess(argv, log_path=node_dir / "kafka.log", cwd=node_dir)
    return RunningKafka(
        name=name,
        data_dir=node_dir,
        keep=keep,
        _proc=proc,
        port=port,
        node_id=node_id,
        controller_port=controller_port,
        cluster_id=cluster_id,
        cluster_size=cluster_size,
        sasl_port=sasl_port if secured else None,
        sasl_ssl_port=None if pki is None else ssl_port,
        tls_ca_file=None if pki is None else pki.ca,
    )


def _existing_cluster_id(dirs: Sequence[Path]) -> str | None:
    """The cluster id of an already formatted node (a reused data dir), if any."""
    for d in dirs:
        meta = d / "data" / "meta.properties"
        if meta.is_file():
            for line in meta.read_text().splitlines():
                if line.startswith("cluster.id="):
                    return line.split("=", 1)[1].strip()
    return None


def _reset_fresh(dirs: Sequence[Path]) -> Callable[[], None]:
    """On a retry with fresh ports, throw away storage a failed attempt formatted (unless
    it existed before we started: a reused data dir keeps its data)."""
    fresh = not any((d / "data").exists() for d in dirs)

    def reset() -> None:
        if fresh:
            for d in dirs:
                shutil.rmtree(d / "data", ignore_errors=True)

    return reset


def start_kafka(
    data_dir: Path | None = None,
    *,
    keep: bool = False,
    name: str = "shoal-kafka",
    timeout: float = 90.0,
    heap: tuple[str, str] = ("256m", "512m"),
    config: Mapping[str, str] | None = None,
    jvm_args: Sequence[str] = (),
    secured: bool = False,
) -> RunningKafka:
    """One Kafka node (broker + controller) on 127.0.0.1, free ports, a temporary data dir
    unless given. ``config`` adds or overrides server.properties entries. ``secured`` adds
    the SASL_PLAINTEXT and SASL_SSL listeners the credential tests use (they cost the
    PLAINTEXT clients throughput: off unless asked for)."""
    find_java()  # missing java or jars: fail before making a directory
    kafka_libs()
    root, keep = own_dir(data_dir, "shoal-kafka-", keep)
    nodes = _start_nodes(
        1,
        root,
        keep=keep,
        node_keep=keep,
        name=name,
        timeout=timeout,
        heap=heap,
        config=config or {},
        jvm_args=jvm_args,
        secured=secured,
    )
    return nodes[0]


def start_kafka_cluster(
    n: int = 3,
    data_dir: Path | None = None,
    *,
    keep: bool = False,
    timeout: float = 120.0,
    heap: tuple[str, str] = ("256m", "512m"),
    config: Mapping[str, str] | None = None,
    jvm_args: Sequence[str] = (),
) -> KafkaCluster:
    """n combined nodes with one static quorum (node ids 1..n); internal topics get
    replication min(3, n). Ready when every node lists all n brokers and a controller."""
    if n < 1:
        raise ValueError("a cluster needs at least one node")
    find_java()
    kafka_libs()
    root, keep = own_dir(data_dir, "shoal-kafka-cluster-", keep)
    servers = _start_nodes(
        n,
        root,
        keep=keep,
        node_keep=True,  # the cluster handle removes root
        name="k",
        timeout=timeout,
        heap=heap,
        config=config or {},
        jvm_args=jvm_args,
        nested=True,
    )
    return KafkaCluster(servers=tuple(servers), data_dir=root, keep=keep)


def _start_nodes(
    n: int,
    root: Path,
    *,
    keep: bool,
    node_keep: bool,
    name: str,
    timeout: float,
    heap: tuple[str, str],
    config: Mapping[str, str],
    jvm_args: Sequence[str],
    nested: bool = False,
    secured: bool = False,
) -> list[RunningKafka]:
    java = find_java()
    libs = kafka_libs()
    dirs = [root / f"k{i}" for i in range(1, n + 1)] if nested else [root]
    reset = _reset_fresh(dirs)

    def build() -> list[RunningKafka]:
        reset()
        cluster_id = _existing_cluster_id(dirs) or new_cluster_id()
        ports = [(free_port(), free_port(), free_port(), free_port()) for _ in range(n)]
        voters = ",".join(f"{i}@{HOST}:{p[1]}" for i, p in enumerate(ports, start=1))
        nodes = []
        for i, (node_dir, node_ports) in enumerate(zip(dirs, ports, strict=True), start=1):
            node_dir.mkdir(parents=True, exist_ok=True)
            nodes.append(
                _kafka_node(
                    java,
                    libs,
                    node_dir,
                    name=f"{name}{i}" if nested else name,
                    keep=node_keep,
                    node_id=i,
                    ports=node_ports,
                    voters=voters,
                    cluster_id=cluster_id,
                    cluster_size=n,
                    heap=heap,
                    config=config,
                    jvm_args=jvm_args,
                    secured=secured,
                )
            )
        with ThreadPoolExecutor(max_workers=n) as pool:  # one JVM per format: in parallel
            for f in [pool.submit(_format, java, libs, d, cluster_id) for d in dirs]:
                f.result()
        return nodes

    return launch(build, root, keep, timeout)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m infra.local.kafka fetch|libs``: fetch the jars once / print where they are."""
    args = list(sys.argv[1:] if argv is None else argv)
    command = args[0] if args else "fetch"
    if command == "fetch":
        try:
            libs, fetched = fetch_kafka(quiet=False)
        except (FileNotFoundError, RuntimeError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        jars = len(list(libs.glob("*.jar")))
        state = "fetched" if fetched else "already present"
        print(f"kafka: {state}, Kafka {KAFKA_VERSION} ({jars} jars) in {libs}")
        return 0
    if command == "libs":
        try:
            print(kafka_libs())
        except FileNotFoundError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        return 0
    print("usage: python -m infra.local.kafka [fetch|libs]", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
