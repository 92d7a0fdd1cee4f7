"""The Docker daemon and CLI as the image builds and the tests use them: start a daemon
where none answers (and stop only one this started), ask what an image was built from
(its ``org.shoal.hash`` label), save and load images."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

__all__ = [
    "HASH_LABEL",
    "DockerError",
    "daemon_answers",
    "docker",
    "image_hash",
    "start_daemon",
    "stop_daemon",
]

HASH_LABEL = "org.shoal.hash"
_START_WITHIN = 60.0  # seconds for a started dockerd to answer
_STOP_WITHIN = 30.0


class DockerError(RuntimeError):
    """A docker command failed; the message carries its output's tail."""


def docker(
    *args: str, input: bytes | None = None, quiet: bool = True, timeout: float | None = None
) -> str:
    """``docker ARGS``; its stdout. ``DockerError`` with the output's tail when it fails."""
    binary = shutil.which("docker")
    if binary is None:
        raise DockerError("docker (the CLI) is not installed: bash infra/local/install.sh docker")
    done = subprocess.run(
        [binary, *args],
        input=input,
        capture_output=quiet,
        timeout=timeout,
        check=False,
    )
    if done.returncode != 0:
        output = (done.stderr or b"").decode(errors="replace").strip()[-2000:]
        raise DockerError(
            f"docker {' '.join(args[:3])} ... failed (exit {done.returncode}): {output}"
        )
    return (done.stdout or b"").decode(errors="replace")


def daemon_answers(timeout: float = 5.0) -> bool:
    try:
        docker("info", "--format", "{{.ServerVersion}}", timeout=timeout)
    except (DockerError, subprocess.TimeoutExpired):
        return False
    return True


def _pidfile(state: Path) -> Path:
    return state / "dockerd.pid"


def start_daemon(state: Path) -> bool:
    """A daemon that answers: the one running, or one started here (as root), its pid in
    ``state/dockerd.pid`` and its log in ``state/dockerd.log``. Whether this started it."""
    if daemon_answers():
        return False
    dockerd = shutil.which("dockerd") or "/usr/sbin/dockerd"
    if not Path(dockerd).is_file():
        raise DockerError("dockerd is not installed: bash infra/local/install.sh docker")
    state.mkdir(parents=True, exist_ok=True)
    with (state / "dockerd.log").open("ab") as log:
        process = subprocess.Popen(
            [dockerd],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # outlives this process: the daemon is the machine's
        )
    _pidfile(state).write_text(str(process.pid))
    deadline = time.monotonic() + _START_WITHIN
    while not daemon_answers(timeout=2.0):
        if process.poll() is not None:
            raise DockerError(f"dockerd exited ({process.returncode}): see {state / 'dockerd.log'}")
        if time.monotonic() > deadline:
            raise DockerError(f"dockerd did not answer within {_START_WITHIN:g} s")
        time.sleep(0.5)
    return True


def stop_daemon(state: Path) -> bool:
    """Stop the daemon ``start_daemon`` started (none other); whether there was one."""
    pidfile = _pidfile(state)
    try:
        pid = int(pidfile.read_text())
    except (OSError, ValueError):
        return False
    try:
        if "dockerd" not in Path(f"/proc/{pid}/comm").read_text():
            pidfile.unlink(missing_ok=True)
            return False  # the pid was reused: not ours
        os.kill(pid, signal.SIGTERM)
    except (OSError, ProcessLookupError):
        pidfile.unlink(missing_ok=True)
        return False
    deadline = time.monotonic() + _STOP_WITHIN
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    if Path(f"/proc/{pid}").exists():
        os.kill(pid, signal.SIGKILL)
    pidfile.unlink(missing_ok=True)
    return True


def image_hash(tag: str) -> str | None:
    """The ``org.shoal.hash`` label of the image ``tag``; None when there is no such image."""
    try:
        found = docker(
            "image", "inspect", "--format", f'{{{{ index .Config.Labels "{HASH_LABEL}" }}}}', tag
        )
    except DockerError:
        return None
    return found.strip() or None
