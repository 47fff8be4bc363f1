"""`zonemedic demo`: the whole story on one machine (twin, Prometheus, fake Slack, the agent).

Only the CLI imports this package (like the twin, it is not in the production image).
"""
