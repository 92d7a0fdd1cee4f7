"""The Scaler port on Kubernetes: ``KubernetesScaler`` reads and sets the handler
Deployment's ``scale`` subresource (apps/v1) with lightkube's async client."""

from adapters.kubernetes._errors import ScaleConflictError
from adapters.kubernetes._scaler import KubernetesScaler
from adapters.kubernetes._settings import SERVICE_ACCOUNT_DIR, KubernetesSettings

__all__ = ["SERVICE_ACCOUNT_DIR", "KubernetesScaler", "KubernetesSettings", "ScaleConflictError"]
