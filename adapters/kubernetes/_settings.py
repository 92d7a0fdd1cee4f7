"""``KubernetesSettings``: which Deployment ``KubernetesScaler`` scales and how it reaches
the API server (env prefix ``SHOAL_K8S_``)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = ["SERVICE_ACCOUNT_DIR", "KubernetesSettings"]

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


class KubernetesSettings(BaseSettings):
    """Settings of ``KubernetesScaler``.

    - ``namespace``: the handler Deployment's namespace; empty means the namespace of the
      configuration (the pod's own namespace in a cluster, the kubeconfig context's one
      outside).
    - ``deployment``: the handler Deployment whose ``scale`` subresource is read and set.
    - ``kubeconfig``: a kubeconfig file to use; empty means in-cluster (the service
      account in ``service_account_dir``), then ``$KUBECONFIG``, then ``~/.kube/config``
      (lightkube's ``KubeConfig.from_env``). ``context`` picks a kubeconfig context.
    - ``timeout``: the bound on every API call (connect, read, the whole call).
    - ``conflict_retries``: how many times a write refused with 409 Conflict is re-read
      and re-applied before giving up.
    - ``field_manager``: recorded by the API server as the writer of ``spec.replicas``.
    """

    model_config = SettingsConfigDict(env_prefix="SHOAL_K8S_", extra="ignore", frozen=True)

    namespace: str | None = None
    deployment: str = Field(
        default="shoal-handler", pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9-]+)*$"
    )
    kubeconfig: Path | None = None
    context: str | None = None
    service_account_dir: Path = SERVICE_ACCOUNT_DIR
    timeout: float = Field(default=10.0, gt=0)
    conflict_retries: int = Field(default=5, ge=0, le=100)
    field_manager: str = "shoal-leader"

    @field_validator("namespace", "kubeconfig", "context", mode="before")
    @classmethod
    def _empty_is_none(cls, value: object) -> object:
        return None if isinstance(value, str) and not value.strip() else value
