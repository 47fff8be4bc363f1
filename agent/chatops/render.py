"""Renders findings, incidents and decisions as Slack Block Kit messages: plain data in, a message
(blocks and a short `text` fallback) out.

Called by the Slack transport (`agent.chatops.slack`) and the outbox deliverer. Pure: no I/O, no
clock (a timestamp to show is passed in), no Slack client; it does not send anything (sending is
the transport's job). import-linter keeps it that way (pyproject.toml).
"""
