"""The attack suite's fixtures: the e2e ones (services as processes on a real
nats-server)."""

from tests.e2e.conftest import scenario_dir, services

__all__ = ["scenario_dir", "services"]
