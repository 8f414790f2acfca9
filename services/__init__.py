"""The four services: ingest, quota, victims, actuator. Each is a thin adapter around
the pure core: consume events, update local state, call the core, publish events."""
