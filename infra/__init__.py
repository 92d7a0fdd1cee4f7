"""Infrastructure helpers (local servers, deployment files)."""
