"""Start the Spark JVM with its stderr captured, so a failed start says why.

PySpark starts the JVM with ``spark-submit``; when the JVM dies before it reports its port,
PySpark raises ``[JAVA_GATEWAY_EXITED] Java gateway process exited before sending its port
number`` and the real reason (a bad setting, no Java, an unresolvable package) went only to
the process's stderr. Here the JVM's stderr is a pipe: a daemon thread drains it for the
JVM's whole life, keeps the last lines, and (if asked) echoes them, and the error raised on
a failed start carries that tail.
"""

from __future__ import annotations

import collections
import contextlib
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import Any

from pyspark import SparkConf
from pyspark.java_gateway import launch_gateway as _untyped_launch_gateway

from adapters.spark._errors import SparkStartError

__all__ = ["JvmStderr", "launch_capturing_stderr"]

TAIL_LINES = 200

launch_gateway: Callable[..., Any] = _untyped_launch_gateway


class JvmStderr:
    """A pipe for a child's stderr, drained by a daemon thread that keeps the last lines."""

    def __init__(self, echo: bool = False, tail_lines: int = TAIL_LINES) -> None:
        self._read_fd, self.write_fd = os.pipe()
        self._echo = echo
        self._lines: collections.deque[str] = collections.deque(maxlen=tail_lines)
        self._partial = ""
        self._lock = threading.Lock()
        self._eof = threading.Event()
        self._thread = threading.Thread(target=self._drain, name="spark-jvm-stderr", daemon=True)
        self._thread.start()

    def close_write_end(self) -> None:
        """Close the parent's copy of the write end (the child keeps its own)."""
        if self.write_fd >= 0:
            os.close(self.write_fd)
            self.write_fd = -1

    def wait_eof(self, timeout: float) -> bool:
        """Wait until every writer (spark-submit and the JVM) has exited."""
        return self._eof.wait(timeout)

    def tail(self, lines: int = 40) -> str:
        with self._lock:
            kept = [*self._lines, *([self._partial] if self._partial else [])]
        return "\n".join(kept[-lines:])

    def _drain(self) -> None:
        try:
            while chunk := os.read(self._read_fd, 65536):
                text = chunk.decode("utf-8", errors="replace")
                if self._echo and sys.__stderr__ is not None:
                    sys.__stderr__.write(text)
                    sys.__stderr__.flush()
                with self._lock:
                    *complete, self._partial = (self._partial + text).split("\n")
                    self._lines.extend(line.rstrip("\r") for line in complete)
        except OSError:
            pass
        finally:
            os.close(self._read_fd)
            self._eof.set()


def launch_capturing_stderr(conf: SparkConf, echo: bool = False) -> tuple[Any, JvmStderr]:
    """Start the JVM gateway for ``conf``; returns it and the stderr capture.

    Raises ``SparkStartError`` whose message ends with the JVM's last stderr lines.
    """
    stderr = JvmStderr(echo=echo)
    try:
        gateway = launch_gateway(conf, popen_kwargs={"stderr": stderr.write_fd})
    except Exception as exc:
        stderr.close_write_end()
        _reap_launcher(exc)
        stderr.wait_eof(timeout=10.0)
        tail = stderr.tail()
        raise SparkStartError(
            f"Spark did not start: {exc}\n--- the JVM's stderr (last lines) ---\n"
            f"{tail or '(nothing: is java on PATH or JAVA_HOME set?)'}",
            jvm_stderr=tail,
        ) from exc
    stderr.close_write_end()
    return gateway, stderr


def _reap_launcher(exc: BaseException) -> None:
    """Close the stdin pipe of the dead ``spark-submit`` and reap it.

    PySpark keeps the ``Popen`` (local ``proc`` of ``launch_gateway``) when the JVM dies
    early and never closes its stdin: found through the traceback, so no pipe is leaked.
    """
    tb = exc.__traceback__
    while tb is not None:
        proc = tb.tb_frame.f_locals.get("proc")
        if isinstance(proc, subprocess.Popen):
            if proc.stdin is not None:
                proc.stdin.close()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)
        tb = tb.tb_next
