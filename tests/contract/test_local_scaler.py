"""The Scaler contract on ``LocalProcessScaler``, and what only local processes promise:
unique ids and the parent's environment per child, own process groups and log files,
graceful scale-down of the newest, SIGKILL after the bound, and no orphans, even when
the leader is SIGKILLed (PR_SET_PDEATHSIG).

The children here run a small stand-in program (``STUB``) instead of
``python -m services.handler``, so these checks need no NATS or etcd and take
milliseconds per child; tests/e2e/test_autoscaling.py runs real handlers.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable, Mapping
from contextlib import AbstractAsyncContextManager
from pathlib import Path

import anyio
import psutil
import pytest

from adapters.local import (
    LocalProcessScaler,
    LocalScalerSettings,
    default_command,
    launch_argv,
    parent_death_supported,
)
from core.ports import Scaler
from tests._unavailable import applies_only_if
from tests.contract._scaler import LIMIT, ScalerContract, ScalerFactory

REPO_ROOT = Path(__file__).resolve().parents[2]

# A handler stand-in: says it started (with its id and group); on SIGTERM it drains for
# STUB_DRAIN seconds, then says how many SIGTERMs it got in all, and exits 0.
STUB = textwrap.dedent(
    """
    import os, signal, sys, time
    count = 0
    def on_term(signum, frame):
        global count
        count += 1
    signal.signal(signal.SIGTERM, on_term)
    # one string: print's separate arguments are separate writes when unbuffered
    print(f"started {os.environ['SHOAL_HANDLER_ID']} {os.environ.get('SHOAL_GROUP')}", flush=True)
    while not count:
        time.sleep(0.01)
    time.sleep(float(os.environ.get("STUB_DRAIN", "0.05")))
    print(f"drained after {count} SIGTERM", flush=True)
    """
)
# A child that ignores SIGTERM: only SIGKILL ends it.
STUBBORN = (
    "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "print('ignoring SIGTERM', flush=True)\ntime.sleep(600)\n"
)


def ignoring_sigterm(path: Path) -> Callable[[], bool]:
    return lambda: log_says(path, "ignoring SIGTERM")


def settings(tmp_path: Path, program: str = STUB, stop_timeout: float = 5.0) -> LocalScalerSettings:
    return LocalScalerSettings(
        log_dir=tmp_path / "children",
        command=(sys.executable, "-c", program),
        stop_timeout=stop_timeout,
    )


def child_env(**extra: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("SHOAL_")}
    return {**base, "SHOAL_GROUP": "g-local-test", **extra}


def gone(pid: int) -> bool:
    """Exited: no such process, or a zombie nobody reaped yet (an orphan's init may not)."""
    try:
        return bool(psutil.Process(pid).status() == psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return True


async def until(check: Callable[[], bool], within: float, what: str) -> None:
    with anyio.fail_after(within):
        # Another process's state: there is no event to await.
        while not check():  # noqa: ASYNC110
            await anyio.sleep(0.02)
    assert check(), what


def log_says(path: Path, text: str) -> bool:
    try:
        return text in path.read_text()
    except FileNotFoundError:
        return False


def started(path: Path) -> Callable[[], bool]:
    return lambda: log_says(path, "started")


class TestLocalProcessScaler(ScalerContract):
    @pytest.fixture
    def make_scaler(self, tmp_path: Path) -> ScalerFactory:
        def make() -> AbstractAsyncContextManager[Scaler]:
            return LocalProcessScaler(settings(tmp_path), env=child_env())

        return make

    async def test_each_child_has_its_id_the_parent_env_its_group_and_log(
        self, tmp_path: Path
    ) -> None:
        async with LocalProcessScaler(settings(tmp_path), env=child_env()) as scaler:
            await scaler.scale_to(3)
            children = scaler.children()
            ids = [c.handler_id for c in children]
            assert len(set(ids)) == 3
            for child in children:
                assert child.log_path.parent == tmp_path / "children"
                assert child.log_path.name == f"{child.handler_id}.log"
                assert os.getpgid(child.pid) == child.pid  # its own process group
                await until(started(child.log_path), LIMIT, "started")
                assert f"started {child.handler_id} g-local-test" in child.log_path.read_text()

    async def test_default_command_runs_the_handler_module(self) -> None:
        assert default_command() == (sys.executable, "-m", "services.handler")
        assert LocalScalerSettings.model_validate({"command": "python -m x --y 'a b'"}).argv() == (
            "python",
            "-m",
            "x",
            "--y",
            "a b",
        )
        assert LocalScalerSettings.model_validate({"command": '["p", "-c", "pass"]'}).argv() == (
            "p",
            "-c",
            "pass",
        )

    async def test_scale_down_drains_the_newest_and_keeps_the_oldest(self, tmp_path: Path) -> None:
        async with LocalProcessScaler(
            settings(tmp_path), env=child_env(STUB_DRAIN="0.3")
        ) as scaler:
            await scaler.scale_to(3)
            oldest, middle, newest = scaler.children()
            for child in (oldest, middle, newest):
                await until(started(child.log_path), LIMIT, "started")
            await scaler.scale_to(1)
            assert scaler.children() == [oldest]
            assert await scaler.replicas() == 1  # draining children no longer count
            with anyio.fail_after(LIMIT):
                await middle.exited.wait()
                await newest.exited.wait()
            assert "drained after 1 SIGTERM" in newest.log_path.read_text()
            assert "drained after 1 SIGTERM" in middle.log_path.read_text()
            assert dict(scaler.finished) == {middle.handler_id: 0, newest.handler_id: 0}
            assert oldest.running()

    async def test_a_child_ignoring_sigterm_is_killed_after_the_bound(self, tmp_path: Path) -> None:
        bound = 0.5
        async with LocalProcessScaler(
            settings(tmp_path, STUBBORN, stop_timeout=bound), env=child_env()
        ) as scaler:
            await scaler.scale_to(1)
            (child,) = scaler.children()
            await until(ignoring_sigterm(child.log_path), LIMIT, "SIGTERM ignored")
            started = anyio.current_time()
            await scaler.scale_to(0)
            with anyio.fail_after(LIMIT):
                await child.exited.wait()
            assert anyio.current_time() - started >= bound * 0.9
            assert dict(scaler.finished)[child.handler_id] == -signal.SIGKILL

    async def test_leaving_stops_every_child(self, tmp_path: Path) -> None:
        async with LocalProcessScaler(settings(tmp_path), env=child_env()) as scaler:
            await scaler.scale_to(3)
            for child in scaler.children():  # its SIGTERM handler is installed
                await until(started(child.log_path), LIMIT, "started")
            pids = [c.pid for c in scaler.children()]
            logs = [c.log_path for c in scaler.children()]
        assert all(gone(pid) for pid in pids)
        assert [status for _, status in scaler.finished] == [0, 0, 0]
        assert all("drained after 1 SIGTERM" in path.read_text() for path in logs)
        assert scaler.all_children() == []

    async def test_leaving_kills_children_that_ignore_sigterm(self, tmp_path: Path) -> None:
        async with LocalProcessScaler(
            settings(tmp_path, STUBBORN, stop_timeout=0.5), env=child_env()
        ) as scaler:
            await scaler.scale_to(2)
            pids = [c.pid for c in scaler.children()]
            for child in scaler.children():
                await until(ignoring_sigterm(child.log_path), LIMIT, "SIGTERM ignored")
        assert all(gone(pid) for pid in pids)
        assert [status for _, status in scaler.finished] == [-signal.SIGKILL] * 2

    async def test_a_crashed_child_no_longer_counts(self, tmp_path: Path) -> None:
        async with LocalProcessScaler(settings(tmp_path), env=child_env()) as scaler:
            await scaler.scale_to(2)
            first, _ = scaler.children()
            await until(started(first.log_path), LIMIT, "started")
            os.kill(first.pid, signal.SIGKILL)  # its launcher: the handler is orphaned...
            with anyio.fail_after(LIMIT):
                await first.exited.wait()
            assert await scaler.replicas() == 1
            # ...and told to stop by the kernel (its parent-death signal), once.
            await until(lambda: log_says(first.log_path, "drained after 1 SIGTERM"), LIMIT, "")
            await scaler.scale_to(2)  # the loop's below-min rule would do this
            assert await scaler.replicas() == 2
            assert first not in scaler.children()

    @applies_only_if(parent_death_supported(), "PR_SET_PDEATHSIG is Linux only")
    async def test_children_drain_once_when_the_leader_is_sigkilled(self, tmp_path: Path) -> None:
        """A leader stand-in process, threaded like the real one (busy threads), runs the
        scaler with two children and is SIGKILLed: no ``__aexit__`` runs. The kernel's
        parent-death signal reaches each launcher (possibly several times: once per
        re-parenting among the dying parent's threads) and each handler gets exactly
        one SIGTERM, drains, and exits."""
        parent_program = textwrap.dedent(
            f"""
            import json, sys, threading, time
            import anyio
            from adapters.local import LocalProcessScaler, LocalScalerSettings
            def spin() -> None:
                while True:
                    pass
            def nap() -> None:
                while True:
                    time.sleep(0.001)
            for i in range(8):
                threading.Thread(target=spin if i % 4 == 0 else nap, daemon=True).start()
            async def main() -> None:
                settings = LocalScalerSettings(
                    log_dir={str(tmp_path / "children")!r},
                    command=({sys.executable!r}, "-c", {STUB!r}),
                )
                async with LocalProcessScaler(settings) as scaler:
                    await scaler.scale_to(2)
                    print(json.dumps([c.pid for c in scaler.children()]), flush=True)
                    await anyio.sleep(600)
            anyio.run(main)
            """
        )
        parent = subprocess.Popen(  # noqa: ASYNC220 (fork+exec: instant)
            [sys.executable, "-c", parent_program],
            cwd=REPO_ROOT,
            env=child_env(STUB_DRAIN="0.5"),
            stdout=subprocess.PIPE,
            process_group=0,
        )
        try:
            assert parent.stdout is not None
            line = await anyio.to_thread.run_sync(parent.stdout.readline)
            pids: list[int] = json.loads(line)
            assert len(pids) == 2 and not any(gone(pid) for pid in pids)
            logs = sorted((tmp_path / "children").glob("*.log"))
            for log_path in logs:
                await until(started(log_path), LIMIT, "started")
            parent.kill()
            parent.wait(timeout=10)
            await until(lambda: all(gone(pid) for pid in pids), 10.0, "children exit")
            for log_path in logs:
                assert "drained after 1 SIGTERM" in log_path.read_text()
        finally:
            if parent.poll() is None:
                os.killpg(parent.pid, signal.SIGKILL)
                parent.wait(timeout=10)
            if parent.stdout is not None:
                parent.stdout.close()


@applies_only_if(parent_death_supported(), "PR_SET_PDEATHSIG is Linux only")
def test_the_launcher_checks_its_leader_and_ends_as_its_command_did() -> None:
    """The race between spawning and prctl: a parent pid that is not the launcher's
    parent means the leader died in between, and the command must not run. Otherwise
    the launcher's exit status is its command's."""

    def run(command: list[str], parent: int | None = None) -> subprocess.CompletedProcess[str]:
        argv = launch_argv(command, stop_bound=1.0, parent=parent)
        return subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)

    done = run([sys.executable, "-c", "print('ran')"], parent=1)
    assert done.returncode == 1 and done.stdout == ""
    assert "the leader exited while this process was starting" in done.stderr
    done = run([sys.executable, "-c", "print('ran')"])
    assert (done.returncode, done.stdout) == (0, "ran\n")
    # The launcher ends as its command did: its exit code, or the signal that killed it.
    assert run([sys.executable, "-c", "raise SystemExit(3)"]).returncode == 3
    done = run([sys.executable, "-c", "import os; os.kill(os.getpid(), 9)"])
    assert done.returncode == -signal.SIGKILL


def test_settings_read_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    env: Mapping[str, str] = {
        "SHOAL_LOCAL_LOG_DIR": "/tmp/x",
        "SHOAL_LOCAL_COMMAND": "python -m services.handler",
        "SHOAL_LOCAL_STOP_TIMEOUT": "3",
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    s = LocalScalerSettings()
    assert s.log_dir == Path("/tmp/x")
    assert s.argv() == ("python", "-m", "services.handler")
    assert s.stop_timeout == 3.0
