"""``KubernetesSettings``: which Deployment ``KubernetesScaler`` scales and how it reaches
the API server (env prefix ``SHOAL_K8S_``)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = ["SERVICE_ACCOUNT_DIR", "KubernetesSettings"]

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


class KubernetesSettings(BaseSettings):
    """Settings of ``KubernetesScaler``; each field's description says what it does
    (docs/settings.md is generated from them)."""

    model_config = SettingsConfigDict(env_prefix="SHOAL_K8S_", extra="ignore", frozen=True)

    namespace: str | None = Field(
        default=None,
        description="the handler Deployment's namespace; unset or empty: the "
        "configuration's (the pod's own in a cluster, the kubeconfig context's outside)",
    )
    deployment: str = Field(
        default="shoal-handler",
        pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9-]+)*$",
        description="the handler Deployment whose `scale` subresource is read and set",
    )
    kubeconfig: Path | None = Field(
        default=None,
        description="a kubeconfig file; unset or empty: in-cluster (the service account in "
        "`SHOAL_K8S_SERVICE_ACCOUNT_DIR`), then `$KUBECONFIG`, then `~/.kube/config` "
        "(lightkube's `KubeConfig.from_env`)",
    )
    context: str | None = Field(default=None, description="the kubeconfig context to use")
    service_account_dir: Path = Field(
        default=SERVICE_ACCOUNT_DIR, description="the in-cluster credentials"
    )
    timeout: float = Field(
        default=10.0,
        gt=0,
        description="seconds: the bound on every API call (connect, read, the whole call)",
    )
    conflict_retries: int = Field(
        default=5,
        ge=0,
        le=100,
        description="how many times a write refused with 409 Conflict is re-read and "
        "re-applied before giving up",
    )
    field_manager: str = Field(
        default="shoal-leader",
        description="recorded by the API server as the writer of `spec.replicas`",
    )

    @field_validator("namespace", "kubeconfig", "context", mode="before")
    @classmethod
    def _empty_is_none(cls, value: object) -> object:
        return None if isinstance(value, str) and not value.strip() else value
