"""``docker compose up`` as a user runs it: infra/docker-compose.yml on this machine's
Docker, its images built here (``infra/images``: the upstream ones cannot be pulled), every
host port on 127.0.0.1.

The default profile (three NATS servers with three replicas of the stream and of the
coordination's buckets, MinIO, nginx, two gateways, two leaders, three handlers) comes up
healthy; 5,000 messages through nginx land in the Delta table on MinIO exactly once (read
with deltalake), while ``docker compose kill handler-2`` and a kill of the NATS server that
leads the data stream fall under load; ``docker compose down -v`` leaves no container,
network or volume of the project behind. ``SHOAL_COMPOSE_VARIANTS=all`` adds the Kafka
profile (Kafka transport) and Redis coordination (the full fault run sets it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import anyio.to_thread
import pytest
from pydantic import SecretStr

from adapters.s3 import S3Settings
from infra.images._docker import daemon_answers
from infra.images._recipes import environment
from infra.local.servers import free_port
from services.cli.devices import LoadGenerator, LoadPlan
from services.common.table import read_landed
from tests._unavailable import unavailable
from tests.e2e._landed import tally_run

pytestmark = [pytest.mark.anyio]

REPO = Path(__file__).resolve().parents[2]
COMPOSE_FILE = REPO / "infra" / "docker-compose.yml"
MESSAGES = 5_000
ZONE = "s3://shoal-landing/zone"
UP_WITHIN = 300.0  # a cold start: JetStream's meta group, 12 containers on 2 cores
VARIANTS = {
    # name: (profiles, settings)
    "nats": ((), {}),
    "kafka": (("kafka",), {"SHOAL_TRANSPORT": "kafka"}),
    "redis": (("redis",), {"SHOAL_COORDINATION": "redis"}),
}
chosen = os.environ.get("SHOAL_COMPOSE_VARIANTS", "nats")
CHOSEN = list(VARIANTS) if chosen == "all" else chosen.split(",")


@dataclass
class Stack:
    """One compose project of the file, under a name of its own."""

    name: str
    env: dict[str, str]
    profiles: tuple[str, ...]
    ports: dict[str, int] = field(default_factory=dict)

    def compose(self, *args: str, timeout: float = 120.0, check: bool = True) -> str:
        profiles = [arg for p in self.profiles for arg in ("--profile", p)]
        done = subprocess.run(
            ["docker", "compose", "-f", str(COMPOSE_FILE), "-p", self.name, *profiles, *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and done.returncode != 0:
            raise AssertionError(
                f"docker compose {' '.join(args)} exited {done.returncode}:\n{done.stderr[-3000:]}"
            )
        return done.stdout

    def leader_of_stream(self, node: str, stream: str) -> str:
        """The server that leads ``stream``'s replicas, as ``node``'s monitor sees it."""
        answer = self.compose(
            "exec", "-T", node, "wget", "-q", "-O", "-", "http://127.0.0.1:8222/jsz?streams=true"
        )
        for account in json.loads(answer).get("account_details", []):
            for found in account.get("stream_detail", []):
                if found["name"] == stream:
                    return str(found["cluster"]["leader"])
        raise AssertionError(f"no stream {stream} in {node}'s /jsz")

    def s3(self) -> S3Settings:
        return S3Settings(
            endpoint_url=f"http://127.0.0.1:{self.ports['SHOAL_MINIO_PORT']}",
            region="us-east-1",
            access_key_id="shoal",
            secret_access_key=SecretStr("shoal-change-me"),
        )

    def running(self) -> list[str]:
        listed = subprocess.run(
            [
                "docker",
                "ps",
                "-a",
                "-q",
                "--filter",
                f"label=com.docker.compose.project={self.name}",
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        return listed.stdout.split()

    def volumes(self) -> list[str]:
        listed = subprocess.run(
            [
                "docker",
                "volume",
                "ls",
                "-q",
                "--filter",
                f"label=com.docker.compose.project={self.name}",
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        return listed.stdout.split()


@pytest.fixture(params=CHOSEN)
def stack(request: pytest.FixtureRequest) -> Iterator[Stack]:
    names = ["shoal", "nats", "minio", "nginx", *VARIANTS[request.param][0]]
    built = subprocess.run(
        [sys.executable, "-m", "infra.images", "build", *names],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    if built.returncode != 0 or not daemon_answers():  # the build starts a daemon where none is
        unavailable(f"no Docker daemon, or the images could not be built: {built.stderr[-2000:]}")
    profiles, settings = VARIANTS[request.param]
    ports = {
        name: free_port()
        for name in (
            "SHOAL_HTTP_PORT",
            "SHOAL_DASHBOARD_PORT",
            "SHOAL_LEADER_1_PORT",
            "SHOAL_LEADER_2_PORT",
            "SHOAL_MINIO_PORT",
        )
    }
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("SHOAL_")},
        **environment(),
        **settings,
        **{k: str(v) for k, v in ports.items()},
    }
    stack = Stack(f"shoal-test-{uuid.uuid4().hex[:8]}", env, profiles, ports)
    try:
        yield stack
    finally:
        stack.compose("down", "-v", "--timeout", "20", timeout=180.0, check=False)


async def test_compose_up_lands_every_message_once_through_kills(stack: Stack) -> None:
    started = time.monotonic()
    await anyio.to_thread.run_sync(
        lambda: stack.compose(
            "up",
            "-d",
            "--wait",
            "--wait-timeout",
            str(int(UP_WITHIN)),
            "--scale",
            "devices=0",
            timeout=UP_WITHIN + 60,
        )
    )
    up_seconds = time.monotonic() - started
    plan = LoadPlan(
        messages=MESSAGES, projects=200, batch=25, concurrency=4, rate=200.0, idempotency_keys=True
    )
    load = LoadGenerator(f"http://127.0.0.1:{stack.ports['SHOAL_HTTP_PORT']}", plan)
    s3 = stack.s3()
    with anyio.fail_after(600):
        async with anyio.create_task_group() as tg:
            done = anyio.Event()

            async def drive() -> None:
                await load.run()
                done.set()

            tg.start_soon(drive)
            await load.wait_accepted(MESSAGES // 4)
            await anyio.to_thread.run_sync(lambda: stack.compose("kill", "handler-2"))
            await load.wait_accepted(MESSAGES // 2)
            # The NATS server that leads the data stream; with Kafka as the transport, the
            # one that leads the coordination's bucket (NATS KV on the same three servers).
            stream = "KV_shoal_default" if "kafka" in stack.profiles else "SHOAL"
            killed_node = await anyio.to_thread.run_sync(stack.leader_of_stream, "nats-1", stream)
            before = len(await _landed(s3))
            await anyio.to_thread.run_sync(lambda: stack.compose("kill", killed_node))
            killed_at = time.monotonic()
            assert not done.is_set(), "the load ended before the kills: they must fall under load"
            again_seconds = await _first_landing_after(s3, before, within=120.0) - killed_at
            await done.wait()
            accepted = set(load.summary.accepted)
            missing = await _wait_landed(s3, accepted, within=180.0)
    tally = tally_run(
        accepted,
        await anyio.to_thread.run_sync(lambda: read_landed(ZONE, s3, columns=["message_id"])),
    )
    stack.compose("down", "-v", "--timeout", "20", timeout=180.0)
    left = stack.running() + stack.volumes()
    print(
        f"\nCOMPOSE {'+'.join(stack.profiles) or 'default'}: up_s={up_seconds:.0f} "
        f"{tally.line()} killed=handler-2,{killed_node} "
        f"landed_again_after_nats_kill_s={again_seconds:.1f} "
        f"load: {load.summary.line()}"
    )
    assert len(accepted) == MESSAGES, load.summary.line()
    assert not missing, f"{len(missing)} accepted messages never landed"
    assert tally.exactly_once, f"{tally.line()} e.g. {tally.examples}"
    assert left == [], f"left behind by down -v: {left}"


async def _landed(s3: S3Settings) -> set[str]:
    def read() -> set[str]:
        try:
            return {str(m) for m in read_landed(ZONE, s3, columns=["message_id"])["message_id"]}
        except OSError:
            return set()  # no table yet

    return await anyio.to_thread.run_sync(read)


async def _first_landing_after(s3: S3Settings, before: int, within: float) -> float:
    """When the table first holds more than ``before`` rows (polled: the table is the point
    of truth, and no event crosses into it)."""
    with anyio.fail_after(within):
        while True:
            if len(await _landed(s3)) > before:
                return time.monotonic()
            await anyio.sleep(0.5)


async def _wait_landed(s3: S3Settings, expected: set[str], within: float) -> set[str]:
    missing = set(expected)
    with anyio.move_on_after(within):
        while missing:
            missing = expected - await _landed(s3)
            if missing:
                await anyio.sleep(1.0)
    return missing
