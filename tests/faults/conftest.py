"""The fault suite runs clusters the way the e2e tests do (same fixtures)."""

from tests.e2e.conftest import make_cluster, pytest_runtest_makereport

__all__ = ["make_cluster", "pytest_runtest_makereport"]
