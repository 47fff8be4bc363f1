"""The one agent rig: the cluster twin, the fake Slack, a real Prometheus and zonemedic agents,
started together on 127.0.0.1 for `zonemedic demo`, the end-to-end tests and the soak.

Rooms: `config.py` (the one settings builder: the agent's configuration file as the rig writes
it, read by `load_settings` in-process or by `zonemedic run --config` in a process), `rig.py`
(`AgentRig`: starts the parts in one directory and stops them in reverse order), `process.py`
(`zonemedic run` as a real process), `prometheus.py` (the Prometheus binary on a free port).
Like the twin and the fakes it runs, it ships in the wheel (the demo runs it) but never in the
production image, and only the demo imports it among the product packages (import-linter
contracts in pyproject.toml).
"""
