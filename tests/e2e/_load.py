"""The e2e tests drive the gateway with the product's own device simulator."""

from services.cli.devices import LoadGenerator, LoadPlan, LoadSummary, project_id

__all__ = ["LoadGenerator", "LoadPlan", "LoadSummary", "project_id"]
