"""The Scaler port on Kubernetes: ``KubernetesScaler`` reads and sets the handler
Deployment's ``scale`` subresource (apps/v1) with lightkube's async client.

Importing this package does not import lightkube (nor httpx2): ``KubernetesScaler`` loads on
first use, so a leader that scales otherwise, or not at all, does without them."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from adapters.kubernetes._errors import ScaleConflictError
from adapters.kubernetes._settings import SERVICE_ACCOUNT_DIR, KubernetesSettings

if TYPE_CHECKING:
    from adapters.kubernetes._scaler import KubernetesScaler

__all__ = ["SERVICE_ACCOUNT_DIR", "KubernetesScaler", "KubernetesSettings", "ScaleConflictError"]


def __getattr__(name: str) -> Any:
    """Load ``KubernetesScaler`` (lightkube) on first use."""
    if name != "KubernetesScaler":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return importlib.import_module("adapters.kubernetes._scaler").KubernetesScaler
