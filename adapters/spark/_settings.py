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

    master: str = "local[*]"
    app_name: str = "shoal-analytics"
    driver_memory: str = "1g"
    shuffle_partitions: int = Field(default=4, ge=1)
    log_level: str = "ERROR"
    echo_jvm_stderr: bool = False
    extra_conf: dict[str, str] = Field(default_factory=dict)

    @property
    def is_local(self) -> bool:
        return self.master == "local" or self.master.startswith("local[")
