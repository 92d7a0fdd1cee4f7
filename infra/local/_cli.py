"""`python -m infra.local.servers KIND`: start servers, print their URLs, stop on Ctrl-C/TERM."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path
from types import FrameType

from infra.local import servers as srv

KINDS = ("nats", "etcd", "redis", "kafka", "nats-cluster", "etcd-cluster", "kafka-cluster")


def _describe(server: srv.RunningServer) -> str:
    return f"pid {server.pid}, data {server.data_dir}, log {server.log_path}"


def _start(group: srv.ServerGroup, kind: str, args: argparse.Namespace) -> list[str]:
    """Start the servers; return the lines to print."""
    d: Path | None = args.data_dir
    keep: bool = args.keep
    if kind == "nats":
        nats = group.start(srv.start_nats, d, jetstream=not args.no_jetstream, keep=keep)
        return [
            f"nats: {nats.url}  monitor {nats.monitor_url}  ({_describe(nats)})",
            f"export SHOAL_NATS_URL={nats.url} SHOAL_TEST_NATS_URL={nats.url}",
        ]
    if kind == "etcd":
        etcd = group.start(srv.start_etcd, d, keep=keep)
        return [
            f"etcd: {etcd.endpoint}  url {etcd.url}  ({_describe(etcd)})",
            f"export SHOAL_ETCD_ENDPOINTS={etcd.endpoint} SHOAL_TEST_ETCD_ENDPOINT={etcd.endpoint}",
        ]
    if kind == "redis":
        redis = group.start(srv.start_redis, d, keep=keep)
        return [
            f"redis: {redis.url}  ({_describe(redis)})",
            f"export SHOAL_REDIS_URL={redis.url} SHOAL_TEST_REDIS_URL={redis.url}",
        ]
    if kind == "kafka":
        kafka = group.start(srv.start_kafka, d, keep=keep)
        return [
            f"kafka: {kafka.bootstrap}  controller {kafka.controller_port}  ({_describe(kafka)})",
            f"export SHOAL_KAFKA_BOOTSTRAP_SERVERS={kafka.bootstrap}"
            f" SHOAL_TEST_KAFKA_BOOTSTRAP={kafka.bootstrap}",
        ]
    if kind == "kafka-cluster":
        kc = group.start(srv.start_kafka_cluster, args.n, d, keep=keep)
        lines = [f"kafka {s.name}: {s.bootstrap}  ({_describe(s)})" for s in kc.servers]
        return [
            *lines,
            f"export SHOAL_KAFKA_BOOTSTRAP_SERVERS={kc.bootstrap}"
            f" SHOAL_TEST_KAFKA_BOOTSTRAP={kc.bootstrap}",
        ]
    if kind == "nats-cluster":
        nc = group.start(srv.start_nats_cluster, args.n, d, keep=keep)
        lines = [
            f"nats {s.name}: {s.url}  monitor {s.monitor_url}  ({_describe(s)})" for s in nc.servers
        ]
        return [*lines, f"export SHOAL_NATS_URL={nc.url} SHOAL_TEST_NATS_URL={nc.url}"]
    ec = group.start(srv.start_etcd_cluster, args.n, d, keep=keep)
    lines = [f"etcd {s.name}: {s.endpoint}  ({_describe(s)})" for s in ec.servers]
    endpoints = ",".join(ec.endpoints)
    return [*lines, f"export SHOAL_ETCD_ENDPOINTS={endpoints} SHOAL_TEST_ETCD_ENDPOINT={endpoints}"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m infra.local.servers",
        description="Run real servers on 127.0.0.1 (free ports) until Ctrl-C or SIGTERM.",
    )
    parser.add_argument("kind", choices=KINDS)
    parser.add_argument("-n", type=int, default=3, help="cluster size (default 3)")
    parser.add_argument("--data-dir", type=Path, default=None, help="default: a temporary dir")
    parser.add_argument("--keep", action="store_true", help="keep the temporary data dir")
    parser.add_argument("--no-jetstream", action="store_true", help="nats: core NATS only")
    args = parser.parse_args(argv)

    stop = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        print(f"\nreceived {signal.Signals(signum).name}, stopping", file=sys.stderr, flush=True)
        stop.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)

    with srv.ServerGroup() as group:
        try:
            lines = _start(group, args.kind, args)
        except (srv.ServerStartError, FileNotFoundError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        print("\n".join(lines), flush=True)
        print("ready; Ctrl-C to stop", file=sys.stderr, flush=True)
        while not stop.wait(1.0):
            dead = [s for s in _all_servers(group) if not s.running()]
            if dead:
                for s in dead:
                    print(f"error: {s.kind} {s.name} exited:\n{s.log_tail()}", file=sys.stderr)
                return 1
    print("stopped", file=sys.stderr, flush=True)
    return 0


def _all_servers(group: srv.ServerGroup) -> list[srv.RunningServer]:
    out: list[srv.RunningServer] = []
    for item in group.servers:
        if isinstance(item, srv.RunningServer):
            out.append(item)
        elif isinstance(item, srv.NatsCluster | srv.EtcdCluster | srv.KafkaCluster):
            out.extend(item.servers)
    return out
