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
    """``SHOAL_SCALING_*``. Defaults are the reference policy's; each field's description
    says what it does (docs/settings.md is generated from them)."""

    model_config = SettingsConfigDict(env_prefix="SHOAL_SCALING_", extra="ignore")

    enabled: bool = Field(
        default=True, description="`false` turns the loop off whatever the scaler"
    )
    scaler: ScalerKind = Field(
        default="none",
        description="`none` (no autoscaling), `local` (handler processes on this machine, "
        "`SHOAL_LOCAL_*`) or `kubernetes` (the handler Deployment's scale, `SHOAL_K8S_*`)",
    )
    interval: float = Field(
        default=30.0,
        gt=0,
        description="seconds between two evaluations by the active leader",
    )
    cpu_max_usage: float = Field(
        default=90.0, ge=0, description="a handler at or above this cpu percent: +1"
    )
    max_project_count: int = Field(
        default=50, ge=0, description="average project_count per handler above it: +1"
    )
    min_replicas: int = Field(
        default=2, ge=0, description="the pool's lower bound (restored at once)"
    )
    max_replicas: int = Field(
        default=10, ge=0, description="the pool's upper bound (restored at once)"
    )
    low_load_threshold: float = Field(
        default=2.0,
        ge=0,
        description="average project_count per handler below it (and more handlers than "
        "the minimum): -1",
    )
    cooldown: float = Field(
        default=600.0,
        ge=0,
        description="seconds without any load-driven action after any action",
    )
    lag_per_handler: int | None = Field(
        default=None,
        ge=1,
        description="the KEDA-style lag rule: when set, want ceil(total lag / this) "
        "handlers (capped at the maximum and the partition count); unset, empty, `none` or "
        "`off`: the rule is off",
    )
    history: int = Field(
        default=50,
        ge=1,
        le=10_000,
        description="decisions the status API keeps (newest first)",
    )
    timeout: float = Field(
        default=30.0,
        gt=0,
        description="seconds: the bound on each read (replicas, member stats, lag) and on "
        "the scaling action",
    )

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

    data_dir: str | None = Field(
        default=None,
        description="the handlers' landing zone (a directory or `s3://bucket/prefix`): the "
        "active leader keeps its Delta table up (`SHOAL_TABLE_*`: compaction, checkpoints, "
        "log cleanup, vacuum; handlers clean nothing, so set it wherever handlers land); "
        "shown in `GET /status` (`table`), `shoal status` and the dashboard. Unset or empty: "
        "no upkeep. The leader never creates the table: it keeps it up once a handler did",
    )

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
