"""One SparkSession per process: started on first use, stopped at interpreter exit."""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import threading
from dataclasses import dataclass

from pyspark import SparkConf, SparkContext
from pyspark.sql import SparkSession

from adapters.spark._errors import SparkStartError
from adapters.spark._jars import delta_jars
from adapters.spark._launch import JvmStderr, launch_capturing_stderr
from adapters.spark._settings import SparkSettings

__all__ = ["RunningSpark", "spark_conf", "start_spark", "stop_spark"]


@dataclass(frozen=True)
class RunningSpark:
    session: SparkSession
    stderr: JvmStderr
    settings: SparkSettings


_lock = threading.Lock()
_running: RunningSpark | None = None
_atexit_registered = False


def spark_conf(settings: SparkSettings) -> SparkConf:
    """The start-up settings: Delta Lake (its jars from the cache: ``delta_jars``), no UI,
    no Hive, no packages, few shuffle partitions, UTC. ``spark.jars`` in ``extra_conf``
    adds to Delta's jars. ``SparkStartError`` when Delta's jars are not in the cache."""
    try:
        jars = [str(jar) for jar in delta_jars()]
    except FileNotFoundError as exc:
        raise SparkStartError(str(exc), jvm_stderr="") from exc
    extra = dict(settings.extra_conf)
    if added := extra.pop("spark.jars", ""):
        jars.append(added)
    conf = SparkConf(loadDefaults=False)
    pairs = {
        "spark.jars": ",".join(jars),
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        # Delta rebuilds a table's state from its log in 50 tasks by default: on a few
        # cores, as many as a shuffle gets here is enough.
        "spark.databricks.delta.snapshotPartitions": str(settings.shuffle_partitions),
        "spark.master": settings.master,
        "spark.app.name": settings.app_name,
        "spark.driver.memory": settings.driver_memory,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.catalogImplementation": "in-memory",
        "spark.sql.shuffle.partitions": str(settings.shuffle_partitions),
        "spark.default.parallelism": str(settings.shuffle_partitions),
        "spark.sql.session.timeZone": "UTC",
        "spark.log.level": settings.log_level,
    }
    if settings.is_local:
        # A local driver talks to itself: skip resolving this host's name.
        pairs["spark.driver.host"] = "127.0.0.1"
        pairs["spark.driver.bindAddress"] = "127.0.0.1"
        # The driver is the executor, and a command runs a few short jobs in a fresh JVM:
        # the C1 compiler alone warms up faster (1M rows, cold: audit ~16 s vs ~34 s; warm
        # it is slower, ~13 s vs ~7 s), and the parallel collector suits batch work.
        pairs["spark.driver.extraJavaOptions"] = "-XX:TieredStopAtLevel=1 -XX:+UseParallelGC"
    pairs.update(extra)
    for key, value in pairs.items():
        conf.set(key, value)
    return conf


def start_spark(settings: SparkSettings | None = None) -> RunningSpark:
    """The process's Spark session, started with ``settings`` on the first call.

    Later calls return the same session (one per process); asking for a different master
    then raises ``SparkStartError``. Raises ``SparkStartError`` when Delta's jars are not
    in the cache, and with the JVM's stderr tail when the JVM or the SparkContext cannot
    start.
    """
    global _running, _atexit_registered  # noqa: PLW0603 (the one session of this process)
    settings = settings or SparkSettings()
    with _lock:
        if _running is not None:
            if _running.settings.master != settings.master:
                raise SparkStartError(
                    f"this process already runs Spark on {_running.settings.master!r}; "
                    f"cannot also use {settings.master!r} (one session per process)",
                    jvm_stderr="",
                )
            return _running
        if settings.is_local:
            os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
            os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
        conf = spark_conf(settings)
        gateway, stderr = launch_capturing_stderr(conf, echo=settings.echo_jvm_stderr)
        try:
            context = SparkContext(conf=conf, gateway=gateway)
        except Exception as exc:
            _discard_gateway(gateway)
            tail = stderr.tail()
            raise SparkStartError(
                f"Spark did not start on {settings.master!r}: {_first_line(exc)}\n"
                f"--- the JVM's stderr (last lines) ---\n{tail}",
                jvm_stderr=tail,
            ) from exc
        context.setLogLevel(settings.log_level)
        _running = RunningSpark(SparkSession(context), stderr, settings)
        if not _atexit_registered:
            atexit.register(_stop_at_exit)
            _atexit_registered = True
        return _running


def stop_spark() -> None:
    """Stop the session (and its SparkContext) if one runs. Idempotent."""
    global _running
    with _lock:
        running, _running = _running, None
    if running is not None:
        running.session.stop()


def _stop_at_exit() -> None:
    with contextlib.suppress(Exception):  # a JVM that already died has nothing to stop
        stop_spark()


def _discard_gateway(gateway: object) -> None:
    """Forget a gateway whose SparkContext failed, and end its JVM, so a retry starts afresh."""
    SparkContext._gateway = None  # PySpark caches the gateway in these class fields
    SparkContext._jvm = None
    proc = getattr(gateway, "proc", None)
    with contextlib.suppress(Exception):  # best effort: the JVM may already be gone
        gateway.shutdown()  # type: ignore[attr-defined]
    if proc is not None and proc.stdin is not None:
        proc.stdin.close()  # the JVM exits when its stdin closes


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    for line in text.splitlines():
        if "Exception" in line or "Error" in line:
            return line.strip()
    return text.splitlines()[0] if text else type(exc).__name__
