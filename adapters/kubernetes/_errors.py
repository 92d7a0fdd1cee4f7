"""Errors of the Kubernetes scaler."""

from __future__ import annotations

from core.errors import ShoalError

__all__ = ["ScaleConflictError"]


class ScaleConflictError(ShoalError):
    """The replica count was not set because another writer changed it concurrently
    (or kept changing the Deployment past the retry budget). Nothing was overwritten."""
