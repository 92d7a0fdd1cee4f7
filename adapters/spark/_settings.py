"""``SparkSettings``: where Spark runs and how it starts (env prefix ``SHOAL_SPARK_``)."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = ["SparkSettings"]


class SparkSettings(BaseSettings):
    """Start-up is tuned for a short-lived local job (measured: see adapters/spark/__init__).

    ``master`` is ``local[*]`` (every core of this machine) or a cluster URL such as
    ``spark://host:7077``. ``extra_conf`` is applied last, so it can override any default
    (``SHOAL_SPARK_EXTRA_CONF='{"spark.driver.memory": "2g"}'``).
    """

    model_config = SettingsConfigDict(env_prefix="SHOAL_SPARK_", extra="ignore")

    master: str = Field(
        default="local[*]",
        description="`local[*]` (every core of this machine) or a cluster URL such as "
        "`spark://host:7077`",
    )
    app_name: str = Field(default="shoal-analytics", description="the Spark application's name")
    driver_memory: str = Field(default="1g", description="`spark.driver.memory`")
    shuffle_partitions: int = Field(default=4, ge=1, description="`spark.sql.shuffle.partitions`")
    log_level: str = Field(default="ERROR", description="the JVM's log level")
    echo_jvm_stderr: bool = Field(default=False, description="copy the JVM's stderr to ours")
    extra_conf: dict[str, str] = Field(
        default_factory=dict,
        description="JSON of Spark settings, applied last: overrides any default "
        '(`{"spark.driver.memory": "2g"}`)',
    )

    @property
    def is_local(self) -> bool:
        return self.master == "local" or self.master.startswith("local[")
