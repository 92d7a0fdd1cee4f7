"""``LocalProcessScaler``: the Scaler port as handler processes on this machine."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import time
import uuid
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import anyio
from anyio.lowlevel import checkpoint

from adapters._lifecycle import Lifecycle
from adapters.local._launcher import launch_argv
from adapters.local._settings import LocalScalerSettings

__all__ = ["LocalChild", "LocalProcessScaler"]

log = logging.getLogger("shoal.adapters.local")

_KILL_WAIT = 5.0  # after SIGKILL, how long to wait for the kernel to finish a child
_KILL_MARGIN = 2.0  # the launcher kills at stop_timeout; the scaler this much later
_POLL = 0.1  # exit polling where pidfd_open is missing


@dataclass(eq=False)
class LocalChild:
    """One handler process started by the scaler. ``started_at`` is the wall clock."""

    handler_id: str
    seq: int
    popen: subprocess.Popen[bytes]
    log_path: Path
    started_at: float
    stopping: bool = False
    exited: anyio.Event = field(default_factory=anyio.Event)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def running(self) -> bool:
        return self.popen.poll() is None


class LocalProcessScaler(Lifecycle):
    """Starts and stops handler processes: ``python -m services.handler`` by default.

    ``async with LocalProcessScaler(settings) as scaler:``. Each child gets the parent's
    environment (so every ``SHOAL_*`` setting) plus its own ``SHOAL_HANDLER_ID``, runs in
    its own process group behind a small launcher (see ``_launcher``) and writes its
    output to ``{log_dir}/{id}.log``. ``LocalChild.pid`` is the launcher's pid.

    - ``replicas()`` counts children that are alive and not asked to stop: a child that
      crashed, or is draining after SIGTERM, no longer counts.
    - ``scale_to(n)`` starts children up to ``n`` at once, or sends SIGTERM to the newest
      ones beyond ``n`` (the launcher forwards it once; the handler drains its
      partitions and leaves); a child still alive ``stop_timeout`` seconds later gets
      SIGKILL. It returns without waiting for the drain.
    - Leaving the block stops every child the same way and waits (bounded by
      ``stop_timeout`` plus a few seconds) until all are gone. If the leader dies
      without leaving it (SIGKILL, crash), the kernel signals each launcher
      (``PR_SET_PDEATHSIG``), which stops its handler the same way, so no child
      outlives it (see ``_launcher``).

    The children belong to this process: a second leader replica has its own (none
    while it is standby). Local scaling is for one machine and one active leader.
    """

    def __init__(
        self,
        settings: LocalScalerSettings | None = None,
        *,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.settings = settings or LocalScalerSettings()
        self._env = dict(env) if env is not None else None
        self._token = uuid.uuid4().hex[:6]
        self._seq = 0
        self._children: dict[str, LocalChild] = {}  # alive or draining, oldest first
        self._lock = anyio.Lock()
        self.finished: deque[tuple[str, int]] = deque(maxlen=256)  # (id, exit status)

    # -- lifecycle -------------------------------------------------------------------

    async def _connect(self) -> None:
        self.settings.log_dir.mkdir(parents=True, exist_ok=True)

    async def _wind_down(self) -> None:
        await self._stop_all()

    # -- the port --------------------------------------------------------------------

    async def replicas(self) -> int:
        await checkpoint()
        return len(self.children())

    async def scale_to(self, replicas: int) -> None:
        if replicas < 0:
            raise ValueError(f"replicas must be >= 0, got {replicas}")
        if self._task_group is None:
            raise RuntimeError("LocalProcessScaler is not open: use it as `async with ...`")
        async with self._lock:
            live = self.children()
            if replicas > len(live):
                for _ in range(replicas - len(live)):
                    self._spawn()
            else:
                for child in reversed(live[replicas:]):  # the newest first
                    self._terminate(child)
            await checkpoint()

    # -- inspection ------------------------------------------------------------------

    def children(self) -> list[LocalChild]:
        """The children that count as replicas (alive, not stopping), oldest first."""
        return [c for c in self._children.values() if not c.stopping and c.running()]

    def all_children(self) -> list[LocalChild]:
        """Every child not yet reaped, draining ones included, oldest first."""
        return list(self._children.values())

    # -- helpers ---------------------------------------------------------------------

    def _spawn(self) -> LocalChild:
        """Start one child. Runs in the event loop's thread: the parent-death signal is
        tied to the thread that forks (see ``_launcher``). No ``preexec_fn``, so
        subprocess uses vfork: nothing runs in the child before ``exec``."""
        s = self.settings
        self._seq += 1
        handler_id = f"{s.id_prefix}-{self._token}-{self._seq}"
        log_path = s.log_dir / f"{handler_id}.log"
        base = self._env if self._env is not None else dict(os.environ)
        env = {**base, "SHOAL_HANDLER_ID": handler_id, "PYTHONUNBUFFERED": "1"}
        with log_path.open("ab") as out:
            popen = subprocess.Popen(
                launch_argv(s.argv(), stop_bound=s.stop_timeout),
                cwd=s.cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                process_group=0,  # its own group: our signals reach it and its children only
                close_fds=True,
            )
        child = LocalChild(handler_id, self._seq, popen, log_path, time.time())
        self._children[handler_id] = child
        self._tasks.start_soon(self._watch, child)
        log.info("started handler %s (pid %d, log %s)", handler_id, popen.pid, log_path)
        return child

    def _terminate(self, child: LocalChild) -> None:
        if child.stopping:
            return
        child.stopping = True
        _signal(child.pid, signal.SIGTERM)
        log.info("sent SIGTERM to handler %s (pid %d)", child.handler_id, child.pid)
        bound = self.settings.stop_timeout + _KILL_MARGIN
        self._tasks.start_soon(self._kill_after, child, bound)

    async def _kill_after(self, child: LocalChild, timeout: float) -> None:  # noqa: ASYNC109
        with anyio.move_on_after(timeout):
            await child.exited.wait()
            return
        if child.running():
            log.warning(
                "handler %s (pid %d) still running %.0f s after SIGTERM: SIGKILL",
                child.handler_id,
                child.pid,
                timeout,
            )
            _signal_group(child.pid, signal.SIGKILL)

    async def _watch(self, child: LocalChild) -> None:
        try:
            status = await _wait_exit(child.popen)
        finally:
            child.exited.set()
            self._children.pop(child.handler_id, None)
        self.finished.append((child.handler_id, status))
        if child.stopping:
            log.info("handler %s exited with %d", child.handler_id, status)
        else:
            log.warning("handler %s exited unexpectedly with %d", child.handler_id, status)

    async def _stop_all(self) -> None:
        children = [c for c in self._children.values() if c.running()]
        for child in children:
            if not child.stopping:
                child.stopping = True
                _signal(child.pid, signal.SIGTERM)
        if not children:
            return
        log.info("stopping %d handlers", len(children))
        with anyio.move_on_after(self.settings.stop_timeout + _KILL_MARGIN):
            for child in children:
                await child.exited.wait()
        for child in children:
            if child.running():
                log.warning("handler %s did not stop in time: SIGKILL", child.handler_id)
                _signal_group(child.pid, signal.SIGKILL)
        with anyio.move_on_after(_KILL_WAIT):
            for child in children:
                await child.exited.wait()
        left = [c.handler_id for c in children if c.running()]
        if left:
            log.error("handlers still running after SIGKILL: %s", left)


async def _wait_exit(popen: subprocess.Popen[bytes]) -> int:
    """Wait for ``popen`` to exit without a thread: a pidfd turns readable at exit
    (Linux >= 5.3); elsewhere, poll. Returns the exit status (negative: the signal)."""
    fd: int | None = None
    if popen.returncode is None:
        with contextlib.suppress(AttributeError, OSError):
            fd = os.pidfd_open(popen.pid)
    if fd is not None:
        try:
            if popen.poll() is None:
                await anyio.wait_readable(fd)
        finally:
            os.close(fd)
    # No pidfd (not Linux, or the pid is already reaped): the exit raises no event to await.
    while popen.poll() is None:  # noqa: ASYNC110
        await anyio.sleep(_POLL)
    return popen.wait()


def _signal(pid: int, sig: signal.Signals) -> None:
    """The launcher only: it forwards one SIGTERM to the handler (the group would
    deliver a second one to the handler directly)."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, sig)
