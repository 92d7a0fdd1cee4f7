"""The leader's own settings beside ``LeaderSettings``: autoscaling (``SHOAL_SCALING_``)
and the landing zone whose table the active leader keeps up (``SHOAL_LEADER_DATA_DIR``).

The policy's thresholds are ``core.scaling.ScalingSettings``; ``AutoscalingSettings``
reads them (and what the loop itself needs) from the environment and checks them at
start-up.
"""

from __future__ import annotations

from typing import Literal, Self

from pydantic import Field, ValidationInfo, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from adapters.s3 import S3Location
from core.errors import InvalidScalingSettings
from core.scaling import ScalingSettings

__all__ = ["SCALER_KINDS", "AutoscalingSettings", "ScalerKind", "TableUpkeepSettings"]

ScalerKind = Literal["none", "local", "kubernetes"]
SCALER_KINDS: tuple[ScalerKind, ...] = ("none", "local", "kubernetes")


class AutoscalingSettings(BaseSettings):
    """``SHOAL_SCALING_*``. Defaults are the reference policy's.

    - ``scaler``: ``none`` (no autoscaling), ``local`` (handler processes on this
      machine, ``SHOAL_LOCAL_*``) or ``kubernetes`` (the handler Deployment's scale,
      ``SHOAL_K8S_*``); ``enabled=false`` turns the loop off whatever the scaler.
    - ``interval``: seconds between two evaluations by the active leader.
    - ``cpu_max_usage``: a handler at or above this cpu percent -> +1.
    - ``max_project_count``: average project_count per handler above it -> +1.
    - ``min_replicas`` / ``max_replicas``: the bounds of the pool.
    - ``low_load_threshold``: average project_count per handler below it -> -1.
    - ``cooldown``: seconds without any action after an action.
    - ``lag_per_handler``: when set, the KEDA-style rule wants
      ``ceil(total lag / lag_per_handler)`` handlers (capped at max_replicas and the
      partition count); empty or unset turns the rule off.
    - ``history``: how many decisions the status API keeps (newest first).
    - ``timeout``: the bound on each read (replicas, member stats, lag) and on the action.
    """

    model_config = SettingsConfigDict(env_prefix="SHOAL_SCALING_", extra="ignore")

    enabled: bool = True
    scaler: ScalerKind = "none"
    interval: float = Field(default=30.0, gt=0)
    cpu_max_usage: float = Field(default=90.0, ge=0)
    max_project_count: int = Field(default=50, ge=0)
    min_replicas: int = Field(default=2, ge=0)
    max_replicas: int = Field(default=10, ge=0)
    low_load_threshold: float = Field(default=2.0, ge=0)
    cooldown: float = Field(default=600.0, ge=0)
    lag_per_handler: int | None = Field(default=None, ge=1)
    history: int = Field(default=50, ge=1, le=10_000)
    timeout: float = Field(default=30.0, gt=0)

    @field_validator("lag_per_handler", mode="before")
    @classmethod
    def _empty_is_none(cls, value: object) -> object:
        if isinstance(value, str) and value.strip().lower() in ("", "none", "off"):
            return None
        return value

    @field_validator("max_replicas")
    @classmethod
    def _max_not_below_min(cls, value: int, info: ValidationInfo) -> int:
        low = info.data.get("min_replicas")
        if isinstance(low, int) and low > value:
            raise ValueError(f"min_replicas {low} is above max_replicas {value}")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        try:
            self.policy(partitions=1)
        except InvalidScalingSettings as exc:
            raise ValueError(str(exc)) from None
        return self

    @property
    def active(self) -> bool:
        """True when the loop runs on the active leader."""
        return self.enabled and self.scaler != "none"

    def policy(self, partitions: int) -> ScalingSettings:
        """The thresholds as the pure policy takes them (``partitions`` caps the lag rule)."""
        return ScalingSettings(
            interval_seconds=self.interval,
            cpu_max_usage=self.cpu_max_usage,
            max_project_count=self.max_project_count,
            min_replicas=self.min_replicas,
            max_replicas=self.max_replicas,
            low_load_threshold=self.low_load_threshold,
            cooldown_seconds=self.cooldown,
            lag_per_handler=self.lag_per_handler,
            partitions=partitions,
        )


class TableUpkeepSettings(BaseSettings):
    """``SHOAL_LEADER_DATA_DIR``: the landing zone whose table the active leader keeps up
    (compaction, checkpoints, vacuum: ``services.common.upkeep``, tuned by
    ``SHOAL_TABLE_*``), the handlers' ``SHOAL_HANDLER_DATA_DIR``: a directory, or
    ``s3://bucket/prefix`` (``SHOAL_S3_*`` / ``AWS_*``). Unset or empty: no upkeep. The
    leader never creates the table: it keeps it up once a handler did."""

    model_config = SettingsConfigDict(env_prefix="SHOAL_LEADER_", extra="ignore")

    data_dir: str | None = None

    @field_validator("data_dir", mode="before")
    @classmethod
    def _empty_is_none(cls, value: object) -> object:
        if isinstance(value, str) and not value.strip():
            return None
        return value

    @field_validator("data_dir")
    @classmethod
    def _a_bucket_for_s3(cls, value: str | None) -> str | None:
        if value is not None and value.startswith("s3://"):
            S3Location.parse(value)
        return value
