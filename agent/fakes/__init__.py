"""Fakes of the outside services the agent talks to, served over real HTTP on loopback.

`slack.py` is the fake Slack Web API (and a fake Slack client of the agent's endpoint). Who uses
them: the tests, the benchmarks and `zonemedic demo`. Like the cluster twin they ship in the wheel
(the demo runs them) but never in the production image, and no product package imports them
(import-linter contracts in pyproject.toml). They import no product code either, so a test that
talks to a fake checks the agent against Slack's protocol, not against itself.
"""
