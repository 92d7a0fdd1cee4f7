"""Real servers started by infra.local.servers: readiness, persistence across crashes, cleanup."""

from __future__ import annotations

import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterable
from pathlib import Path

import anyio
import anyio.to_thread
import etcd3aio
import nats
import nats.errors
import pytest
from etcd3aio.kv import KVService
from nats.js import JetStreamContext
from nats.js.api import StorageType

from infra.local import servers as servers_module
from infra.local._testservers import ServerInfo, select_mode
from infra.local.servers import (
    RunningServer,
    ServerGroup,
    ServerStartError,
    free_port,
    pid_alive,
    start_etcd,
    start_etcd_cluster,
    start_nats,
    start_nats_cluster,
    start_redis,
)

REPO = Path(__file__).resolve().parents[2]


def redis_command(port: int, *args: str) -> bytes:
    """One RESP command over a raw socket; the raw reply."""
    payload = f"*{len(args)}\r\n".encode() + b"".join(
        f"${len(a.encode())}\r\n{a}\r\n".encode() for a in args
    )
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(payload)
        return s.recv(65536)


def kv(client: etcd3aio.Etcd3Client) -> KVService:
    assert client.kv is not None, "Etcd3Client not connected"
    return client.kv


def test_free_port_unique_and_bindable() -> None:
    ports = [free_port() for _ in range(300)]
    assert len(set(ports)) == len(ports)
    for port in ports[:20]:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))


@pytest.mark.anyio
async def test_nats_jetstream_message_survives_kill_and_restart() -> None:
    with anyio.fail_after(60):
        async with ServerGroup() as group:
            server = await group.astart(start_nats)
            assert server.url == f"nats://127.0.0.1:{server.port}"
            nc = await nats.connect(server.url)
            try:
                js = nc.jetstream()
                await js.add_stream(name="T", subjects=["t.>"], storage=StorageType.FILE)
                ack = await js.publish("t.1", b"hello")
                assert (ack.stream, ack.seq) == ("T", 1)
            finally:
                await nc.close()

            pid = server.pid
            assert pid is not None
            server.kill()
            assert not pid_alive(pid)
            assert not server.running()
            await anyio.to_thread.run_sync(server.restart)
            assert server.pid not in (None, pid)

            nc = await nats.connect(server.url)
            try:
                js = nc.jetstream()
                info = await js.stream_info("T")
                assert info.state.messages == 1
                msg = await js.get_msg("T", 1)
                assert (msg.subject, msg.data) == ("t.1", b"hello")
            finally:
                await nc.close()


@pytest.mark.anyio
async def test_etcd_put_get_survives_kill_and_restart() -> None:
    with anyio.fail_after(60):
        async with ServerGroup() as group:
            server = await group.astart(start_etcd)
            assert server.url == f"http://{server.endpoint}"
            async with etcd3aio.Etcd3Client([server.endpoint]) as client:
                await kv(client).put("/shoal/test/key", "v1")
                got = await kv(client).get("/shoal/test/key")
                assert [kv.value for kv in got.kvs] == [b"v1"]

            pid = server.pid
            assert pid is not None
            server.kill()
            assert not pid_alive(pid)
            await anyio.to_thread.run_sync(server.restart)

            async with etcd3aio.Etcd3Client([server.endpoint]) as client:
                got = await kv(client).get("/shoal/test/key")
                assert [kv.value for kv in got.kvs] == [b"v1"]


def test_redis_ping_and_config() -> None:
    with ServerGroup() as group:
        server = group.start(start_redis)
        assert redis_command(server.port, "PING") == b"+PONG\r\n"
        reply = redis_command(server.port, "CONFIG", "GET", "notify-keyspace-events")
        assert b"AKE" in reply
        assert redis_command(server.port, "CONFIG", "GET", "save").endswith(b"$0\r\n\r\n")


@pytest.mark.parametrize("starter", [start_nats, start_etcd, start_redis])
def test_stop_leaves_no_process_and_no_temp_dir(starter: Callable[[], RunningServer]) -> None:
    server = starter()
    pid, data_dir = server.pid, server.data_dir
    assert pid is not None
    assert pid_alive(pid)
    assert data_dir.is_dir()
    server.stop()
    assert not pid_alive(pid)
    assert not server.running()
    assert not data_dir.exists()
    server.stop()  # idempotent


def test_keep_and_given_data_dir_are_not_removed(tmp_path: Path) -> None:
    server = start_nats(tmp_path / "nats")
    server.stop()
    assert (tmp_path / "nats" / "nats.log").is_file()
    kept = start_redis(keep=True)
    kept.stop()
    assert kept.data_dir.is_dir()
    kept.stop(remove_data=True)
    assert not kept.data_dir.exists()


def test_group_stops_its_servers_on_exception() -> None:
    pids: list[int] = []
    with pytest.raises(RuntimeError, match="boom"), ServerGroup() as group:
        for starter in (start_nats, start_redis):
            pid = group.start(starter).pid
            assert pid is not None
            pids.append(pid)
        raise RuntimeError("boom")
    assert pids
    assert not any(pid_alive(p) for p in pids)


@pytest.mark.parametrize("starter", [start_etcd, start_redis])
def test_start_retries_on_fresh_ports_when_a_port_is_taken(
    starter: Callable[[], RunningServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = int(taken.getsockname()[1])
        handed: list[int] = []

        def first_busy() -> int:
            port = busy if not handed else free_port()
            handed.append(port)
            return port

        monkeypatch.setattr(servers_module, "free_port", first_busy)
        server = starter()
        try:
            assert server.ready()
            assert busy in handed
            assert server.endpoint != f"127.0.0.1:{busy}"
        finally:
            server.stop()


def test_start_failure_reports_the_log_tail() -> None:
    with pytest.raises(ServerStartError) as err:
        start_nats(extra_args=["--no-such-flag"])
    text = str(err.value)
    assert "exited with code" in text
    assert "no-such-flag" in text  # nats-server's own complaint, from its log


async def publish_retrying(js: JetStreamContext, subject: str, data: bytes, msg_id: str) -> int:
    """Publish until a server acks (a stream elects a new leader after a kill); dedup by id.

    The bound is generous: re-election takes ~5-6 s on an idle machine and took over 10 s in
    CI, where the contract tier shares two cores with the unit tier.
    """
    with anyio.fail_after(40):
        while True:
            try:
                ack = await js.publish(subject, data, timeout=2, headers={"Nats-Msg-Id": msg_id})
            except (nats.errors.Error, TimeoutError):
                await anyio.sleep(0.2)
            else:
                return int(ack.seq)


@pytest.mark.anyio
async def test_nats_cluster_r3_stream_survives_stream_leader_kill() -> None:
    # ~8 s: after kill -9 of the stream leader, publishes fail for ~5-6 s until re-election;
    # a fresh cluster's first meta-leader election rarely takes ~6 s too. Slower under load.
    with anyio.fail_after(90):
        async with ServerGroup() as group:
            cluster = await group.astart(start_nats_cluster, 3)
            assert len(cluster.urls) == 3
            assert cluster.url == ",".join(cluster.urls)
            assert cluster.meta_leader() in cluster.servers
            nc = await nats.connect(servers=list(cluster.urls))
            try:
                js = nc.jetstream()
                await js.add_stream(name="R", subjects=["r.>"], num_replicas=3)
                assert await publish_retrying(js, "r.1", b"one", "m1") == 1
                info = await js.stream_info("R")
                assert info.cluster is not None
                [leader] = [s for s in cluster.servers if s.name == info.cluster.leader]
                leader.kill()
                assert await publish_retrying(js, "r.2", b"two", "m2") == 2
                await anyio.to_thread.run_sync(leader.restart)
                assert (await js.stream_info("R")).state.messages == 2
            finally:
                await nc.close()


@pytest.mark.anyio
async def test_etcd_cluster_keeps_quorum_with_one_member_down() -> None:
    with anyio.fail_after(60):
        async with ServerGroup() as group:
            cluster = await group.astart(start_etcd_cluster, 3)
            first, second, third = cluster.servers
            async with etcd3aio.Etcd3Client([first.endpoint]) as client:
                await kv(client).put("/shoal/test/cluster", "c")
            first.kill()
            async with etcd3aio.Etcd3Client([third.endpoint]) as client:
                got = await kv(client).get("/shoal/test/cluster")
                assert [kv.value for kv in got.kvs] == [b"c"]
            await anyio.to_thread.run_sync(first.restart)
            assert second.running()


def _read_lines(stream: Iterable[str], out: queue.Queue[str]) -> None:
    for line in stream:
        out.put(line)


def test_cli_prints_urls_and_stops_on_sigterm() -> None:
    cmd = [sys.executable, "-m", "infra.local.servers", "redis"]
    with subprocess.Popen(
        cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    ) as proc:
        lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=_read_lines, args=(proc.stdout, lines), daemon=True).start()
        try:
            first = lines.get(timeout=15)
            export = lines.get(timeout=5)
            m = re.search(r"redis://127\.0\.0\.1:(\d+) .*pid (\d+)", first)
            assert m, first
            port, pid = int(m[1]), int(m[2])
            url = f"redis://127.0.0.1:{port}"
            assert export.strip() == f"export SHOAL_REDIS_URL={url} SHOAL_TEST_REDIS_URL={url}"
            assert redis_command(port, "PING") == b"+PONG\r\n"
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=15) == 0
        finally:
            if proc.poll() is None:  # a failed check must not leave `with Popen` waiting
                proc.kill()
    assert not pid_alive(pid)


def test_atexit_kills_servers_left_running() -> None:
    code = (
        "from infra.local.servers import start_nats\n"
        "s = start_nats()\n"
        "print(s.pid, s.data_dir, flush=True)\n"
    )  # exits without stopping the server
    done = subprocess.run(
        [sys.executable, "-c", code],
        check=False,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=20,
    )
    assert done.returncode == 0, done.stderr
    pid_text, data_dir = done.stdout.split()
    assert not pid_alive(int(pid_text))
    assert not Path(data_dir).exists()


def test_select_mode() -> None:
    assert select_mode({"SHOAL_TEST_SERVERS": "external"}) == "external"
    with pytest.raises(ValueError, match="SHOAL_TEST_SERVERS"):
        select_mode({"SHOAL_TEST_SERVERS": "podman"})
    if "DOCKER_HOST" not in os.environ and not Path("/var/run/docker.sock").exists():
        assert select_mode({}) == "local"


@pytest.mark.anyio
async def test_session_fixtures_serve_real_servers(
    nats_server: ServerInfo, etcd_server: ServerInfo, redis_server: ServerInfo
) -> None:
    with anyio.fail_after(20):
        nc = await nats.connect(nats_server.url)
        try:
            sub = await nc.subscribe("fixture.check")
            await nc.publish("fixture.check", b"ping")
            assert (await sub.next_msg(timeout=5)).data == b"ping"
        finally:
            await nc.close()
        async with etcd3aio.Etcd3Client(etcd_server.endpoints) as client:
            await kv(client).put("/shoal/test/fixture", "ok")
            assert (await kv(client).get("/shoal/test/fixture")).kvs[0].value == b"ok"
        host, _, port = redis_server.endpoint.rpartition(":")
        assert host
        assert redis_command(int(port), "PING") == b"+PONG\r\n"
    if nats_server.mode == "local":
        assert nats_server.process is not None
        assert nats_server.process.running()
