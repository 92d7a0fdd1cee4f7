"""Process plumbing for infra.local.servers: ports, binaries, child processes, readiness.

Children are started directly (never through a shell) in their own session, so the PID
we signal is the server's and a Ctrl-C in the terminal reaches only us: we stop them.
An atexit hook kills whatever is still running and removes the temporary directories.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import NoReturn

from core.server_floors import Feature, parse_version

INSTALL_HINT = "run infra/local/install.sh"

_lock = threading.Lock()
_handed_out: set[int] = set()
_live: set[ManagedProcess] = set()
_temp_dirs: dict[Path, int] = {}  # path -> pid of the process that made it


class ServerStartError(RuntimeError):
    """A server did not become ready; the message carries the tail of its log."""

    def __init__(self, message: str, *, port_in_use: bool = False) -> None:
        super().__init__(message)
        self.port_in_use = port_in_use


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now, never handed out before by this process."""
    for _ in range(200):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        with _lock:
            if port not in _handed_out:
                _handed_out.add(port)
                return port
    raise RuntimeError("no unused free port found on 127.0.0.1")


_binary_cache: dict[str, Path] = {}


def find_binary(
    name: str,
    *,
    env_var: str,
    needs: Iterable[Feature],
    hint: str,
) -> Path:
    """First of $env_var, PATH, the directory of sys.executable whose --version holds every
    feature shoal ``needs`` of it (``core.server_floors``); ``hint`` says how to get one."""
    wanted = tuple(needs)
    with _lock:
        if name in _binary_cache:
            return _binary_cache[name]
    candidates: list[str] = []
    if os.environ.get(env_var):
        candidates.append(os.environ[env_var])
    on_path = shutil.which(name)
    if on_path:
        candidates.append(on_path)
    candidates.append(str(Path(sys.executable).parent / name))
    seen: list[str] = []
    for cand in dict.fromkeys(candidates):
        path = Path(cand)
        if not (path.is_file() and os.access(path, os.X_OK)):
            continue
        try:
            out = subprocess.run(
                [str(path), "--version"], capture_output=True, text=True, timeout=10, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            seen.append(f"{path} ({exc})")
            continue
        version = parse_version(out.stdout + out.stderr)
        if version is not None and all(f.held_by(version) for f in wanted):
            with _lock:
                _binary_cache[name] = path
            return path
        seen.append(f"{path} (version {version})")
    found = "; found: " + ", ".join(seen) if seen else ""
    requirement = ", ".join(f.requirement() for f in wanted)
    raise FileNotFoundError(
        f"{name} with {requirement} not found ({hint}; set {env_var}, or {INSTALL_HINT}){found}"
    )


def log_tail(path: Path, lines: int = 30) -> str:
    try:
        data = path.read_bytes()[-16384:]
    except OSError as exc:
        return f"(no log: {exc})"
    return "\n".join(data.decode("utf-8", "replace").splitlines()[-lines:])


def make_temp_dir(prefix: str, *, remove_at_exit: bool) -> Path:
    path = Path(tempfile.mkdtemp(prefix=prefix))
    if remove_at_exit:
        with _lock:
            _temp_dirs[path] = os.getpid()
    return path


def remove_dir(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
    with _lock:
        _temp_dirs.pop(path, None)


def pid_alive(pid: int) -> bool:
    """True while a process with this pid exists (zombies count as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rpartition(")")[2].split()[0] != "Z"


class ManagedProcess:
    """One server binary: spawn, SIGTERM-then-SIGKILL stop, SIGKILL, always reaped."""

    def __init__(
        self, argv: Sequence[str], *, log_path: Path, cwd: Path, env: dict[str, str] | None = None
    ) -> None:
        self.argv = tuple(argv)
        self.log_path = log_path
        self.cwd = cwd
        self.env = env
        self._popen: subprocess.Popen[bytes] | None = None
        self._plock = threading.Lock()
        self._owner_pid = os.getpid()

    @property
    def pid(self) -> int | None:
        p = self._popen
        return p.pid if p is not None and p.poll() is None else None

    @property
    def owner_pid(self) -> int:
        """PID of the process that spawned the server (only it stops it at exit)."""
        return self._owner_pid

    @property
    def returncode(self) -> int | None:
        p = self._popen
        return None if p is None else p.poll()

    def running(self) -> bool:
        return self.pid is not None

    def spawn(self) -> None:
        with self._plock:
            if self._popen is not None and self._popen.poll() is None:
                raise RuntimeError(f"{self.argv[0]} is already running (pid {self._popen.pid})")
            stamp = time.strftime("%Y-%m-%d %H:%M:%S")
            with self.log_path.open("ab") as log:
                log.write(f"--- {stamp} shoal starts: {shlex.join(self.argv)}\n".encode())
                log.flush()
                self._popen = subprocess.Popen(
                    self.argv,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    cwd=self.cwd,
                    env=self.env,
                    start_new_session=True,
                )
        self._owner_pid = os.getpid()
        with _lock:
            _live.add(self)

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM, wait up to timeout, then SIGKILL. Idempotent."""
        self._signal_and_reap(signal.SIGTERM, timeout)

    def kill(self) -> None:
        """SIGKILL now (a crash, for fault tests) and reap."""
        self._signal_and_reap(signal.SIGKILL, 5.0)

    def _signal_and_reap(self, sig: signal.Signals, timeout: float) -> None:
        with self._plock:
            p = self._popen
            if p is not None and p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    p.send_signal(sig)
                try:
                    p.wait(timeout)
                except subprocess.TimeoutExpired:
                    with contextlib.suppress(ProcessLookupError):
                        p.kill()
                    p.wait(5.0)
        with _lock:
            _live.discard(self)


def wait_ready(
    proc: ManagedProcess, probe: Callable[[], bool], *, what: str, timeout: float
) -> None:
    """Poll probe() until it is true; fail fast if the process exits; the error has the log."""
    deadline = time.monotonic() + timeout
    delay = 0.02
    while True:
        code = proc.returncode
        if code is not None:
            _fail(proc, f"{what} exited with code {code} before it was ready")
        if probe():
            return
        if time.monotonic() >= deadline:
            _fail(proc, f"{what} not ready after {timeout:.1f} s")
        time.sleep(delay)
        delay = min(delay * 1.5, 0.2)


def _fail(proc: ManagedProcess, reason: str) -> NoReturn:
    tail = log_tail(proc.log_path)
    in_use = "address already in use" in tail.lower()
    raise ServerStartError(
        f"{reason}\n  command: {shlex.join(proc.argv)}\n  log {proc.log_path} (last lines):\n"
        + "\n".join("    " + line for line in tail.splitlines()),
        port_in_use=in_use,
    )


def http_get(
    url: str, timeout: float = 1.0, *, post: bytes | None = None
) -> tuple[int, bytes] | None:
    """(status, body) for any HTTP answer, None when nothing answers. POSTs `post` if given."""
    req = urllib.request.Request(url, data=post, method="GET" if post is None else "POST")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return int(resp.status), bytes(resp.read())
    except urllib.error.HTTPError as err:
        with err:
            return int(err.code), bytes(err.read())
    except (OSError, ValueError):
        return None


def http_json(url: str, timeout: float = 1.0, *, post: bytes | None = None) -> object:
    got = http_get(url, timeout, post=post)
    if got is None or got[0] != 200:
        return None
    try:
        return json.loads(got[1])
    except ValueError:
        return None


def tcp_greeting(
    port: int, send: bytes, expect: bytes | tuple[bytes, ...], timeout: float = 1.0
) -> bool:
    """Connect to 127.0.0.1:port, optionally send, and check the answer starts with expect
    (one of them, when several)."""
    wanted = (expect,) if isinstance(expect, bytes) else expect
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            if send:
                s.sendall(send)
            data = b""
            while len(data) < max(len(w) for w in wanted) and not data.startswith(wanted):
                chunk = s.recv(256)
                if not chunk:
                    break
                data += chunk
            return data.startswith(wanted)
    except OSError:
        return False


def clean_env(drop_prefix: str) -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(drop_prefix)}


@atexit.register
def _kill_leftovers() -> None:
    """Safety net: kill every child still running and remove our temporary directories."""
    with _lock:
        live = list(_live)
        dirs = [path for path, pid in _temp_dirs.items() if pid == os.getpid()]
    for proc in live:
        if proc.owner_pid == os.getpid():  # not in a forked child that inherited the set
            with contextlib.suppress(Exception):
                proc.kill()
    for path in dirs:
        shutil.rmtree(path, ignore_errors=True)
