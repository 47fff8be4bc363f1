"""The cluster twin: an emulated Kubernetes API server with scheduler, operators, dataplane, exporter.

Used by tests, benchmarks and the demo. Agent code never imports it (import-linter enforces this);
only `agent.cli` does, lazily, for the `zonemedic twin` commands.
"""
