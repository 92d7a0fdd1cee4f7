"""A Spark standalone cluster for a test: one master and its workers on 127.0.0.1, started
from the pyspark installation's own ``bin/spark-class`` (no other Spark to install).

Every daemon listens on 127.0.0.1 only (``--host`` and ``SPARK_LOCAL_IP``: the web UIs bind
to it too), on ports free now (the master's REST submission server, on 6066 by default, is
off); its log, and a worker's work directory (each executor's
``stdout``/``stderr`` under ``app-*/N/``) and scratch directory, are under ``root``; an
empty ``SPARK_CONF_DIR`` keeps any ``spark-env.sh``/``spark-defaults.conf`` out. Ready
means the master's JSON status (``/json/``) lists every worker alive, polled: no sleep.
Stopping ends the workers (each kills its executors) and then the master, each SIGTERM and
then SIGKILL, and checks that no process is left in their process groups (an executor
stays in its worker's group); one left is killed and reported.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import pyspark

from infra.local._process import (
    ManagedProcess,
    ServerStartError,
    free_port,
    http_json,
    log_tail,
    wait_ready,
)

__all__ = ["StandaloneCluster", "spark_home"]

READY_SECONDS = 90.0  # two cold JVMs at once on a busy 2-core machine


def spark_home() -> Path:
    """The pyspark installation: its ``bin/spark-class`` and ``jars/``."""
    return Path(pyspark.__file__).parent


@dataclass(frozen=True)
class Daemon:
    process: ManagedProcess
    pid: int  # and its process group's id: it leads a session of its own
    ui_port: int
    work_dir: Path | None = None  # a worker's: its executors' directories


class StandaloneCluster:
    """``with StandaloneCluster(root) as cluster:`` a master at ``cluster.master_url`` and
    ``workers`` workers of ``cores`` cores and ``memory`` each, ready."""

    def __init__(self, root: Path, *, workers: int = 2, cores: int = 1, memory: str = "1g"):
        self.root = root
        self.port = free_port()
        self.master_url = f"spark://127.0.0.1:{self.port}"
        self._workers = workers
        self._cores = cores
        self._memory = memory
        self._master: Daemon | None = None
        self.workers: list[Daemon] = []
        self.leftovers: list[str] = []  # processes stopping found still running (killed)

    @property
    def status_url(self) -> str:
        assert self._master is not None
        return f"http://127.0.0.1:{self._master.ui_port}/json/"

    def status(self) -> dict[str, Any]:
        """The master's JSON status (``aliveworkers``, ``workers``, ``activeapps``,
        ``completedapps``...); ``{}`` when it does not answer."""
        got = http_json(self.status_url, timeout=2.0)
        return got if isinstance(got, dict) else {}

    def __enter__(self) -> Self:
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _start(self) -> None:
        ui = free_port()
        master = self._spawn(
            "master",
            "org.apache.spark.deploy.master.Master",
            "--host", "127.0.0.1",
            "--port", str(self.port),
            "--webui-port", str(ui),
        )  # fmt: skip
        self._master = Daemon(master, _pid(master), ui)
        wait_ready(
            master,
            lambda: self.status().get("status") == "ALIVE",
            what="the Spark master",
            timeout=READY_SECONDS,
        )
        for n in range(1, self._workers + 1):
            work_dir = self.root / f"worker-{n}" / "work"
            work_dir.mkdir(parents=True)
            ui = free_port()
            worker = self._spawn(
                f"worker-{n}",
                "org.apache.spark.deploy.worker.Worker",
                self.master_url,
                "--host", "127.0.0.1",
                "--port", str(free_port()),
                "--webui-port", str(ui),
                "--cores", str(self._cores),
                "--memory", self._memory,
                "--work-dir", str(work_dir),
            )  # fmt: skip
            self.workers.append(Daemon(worker, _pid(worker), ui, work_dir))
        deadline = time.monotonic() + READY_SECONDS
        while self.status().get("aliveworkers", 0) < self._workers:
            for daemon in [self._master, *self.workers]:
                code = daemon.process.returncode
                if code is not None:
                    raise ServerStartError(
                        f"{daemon.process.argv[1]} exited with code {code}\n{self.logs()}"
                    )
            if time.monotonic() > deadline:
                raise ServerStartError(
                    f"{self._workers} workers not alive at {self.status_url} after "
                    f"{READY_SECONDS:.0f} s: {self.status()}\n{self.logs()}"
                )
            time.sleep(0.2)

    def _spawn(self, name: str, main_class: str, *args: str) -> ManagedProcess:
        folder = self.root / name
        conf = self.root / "conf"  # empty: no spark-env.sh, no spark-defaults.conf
        scratch = folder / "local"
        for path in (conf, scratch):
            path.mkdir(parents=True, exist_ok=True)
        home = spark_home()
        env = {
            **os.environ,
            "SPARK_HOME": str(home),
            "SPARK_CONF_DIR": str(conf),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_LOCAL_HOSTNAME": "127.0.0.1",
            "SPARK_LOCAL_DIRS": str(scratch),
            "SPARK_DAEMON_MEMORY": "256m",
            # the C1 compiler alone: the cluster is ready in 6 s instead of 11 s here
            "SPARK_DAEMON_JAVA_OPTS": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
            # no REST submission server (Spark 4 opens one on port 6066 by default)
            "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
        }
        process = ManagedProcess(
            [str(home / "bin" / "spark-class"), main_class, *args],
            log_path=folder / f"{name}.log",
            cwd=folder,
            env=env,
        )
        process.spawn()
        return process

    def stop(self) -> None:
        """Stop the workers (and their executors), then the master; none is left running
        (``leftovers`` names any that had to be killed after its daemon stopped)."""
        daemons = [*self.workers, *([self._master] if self._master is not None else [])]
        for daemon in daemons:
            daemon.process.stop(timeout=15.0)
        for daemon in daemons:
            for pid, command in _members(daemon.pid, self.root):
                self.leftovers.append(f"{pid} {command}")
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        for daemon in self.workers:  # the executors' copies of the jars: 700 MB each
            assert daemon.work_dir is not None
            for jar in daemon.work_dir.glob("app-*/*/*.jar"):
                jar.unlink()

    def logs(self) -> str:
        """The tail of each daemon's log (for a failure's message)."""
        daemons = [*([self._master] if self._master is not None else []), *self.workers]
        return "\n".join(
            f"--- {d.process.log_path}\n{log_tail(d.process.log_path)}" for d in daemons
        )


def _pid(process: ManagedProcess) -> int:
    pid = process.pid
    if pid is None:
        raise ServerStartError(f"{process.argv[1]} exited at once\n{log_tail(process.log_path)}")
    return pid


def _members(group: int, root: Path) -> list[tuple[int, str]]:
    """(pid, command line) of the live processes in process group ``group`` that work
    under ``root`` (a daemon, an executor, its Python workers: never a stranger that got
    a pid reused)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cwd = (entry / "cwd").readlink()
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue  # gone meanwhile
        fields = stat.rpartition(")")[2].split()
        if fields[0] != "Z" and int(fields[2]) == group and cwd.is_relative_to(root.resolve()):
            found.append((int(entry.name), command[:200]))
    return found
