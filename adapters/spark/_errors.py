"""What the Spark analytics raise (importable without pyspark)."""

from __future__ import annotations

__all__ = [
    "AnalyticsError",
    "LandingDirError",
    "NoDataError",
    "SparkJobError",
    "SparkStartError",
]


class AnalyticsError(Exception):
    """Base of every analytics failure."""


class LandingDirError(AnalyticsError):
    """The landing directory (or the ledger directory) is missing or unreadable."""


class NoDataError(AnalyticsError):
    """The job needs landed rows and found none."""


class _WithJvmStderr(AnalyticsError):
    def __init__(self, message: str, jvm_stderr: str = "") -> None:
        super().__init__(message)
        self.jvm_stderr = jvm_stderr


class SparkStartError(_WithJvmStderr):
    """Spark did not start. The message ends with the JVM's last stderr lines
    (``jvm_stderr``), where the real cause is: PySpark itself only says
    ``[JAVA_GATEWAY_EXITED] Java gateway process exited before sending its port number``."""


class SparkJobError(_WithJvmStderr):
    """A Spark job failed (or the JVM died during it); the message carries Spark's error
    and, when the JVM is gone, its last stderr lines."""
