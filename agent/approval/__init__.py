"""Approvals: what a new incident needs, who may decide it, the one decision, and its deadline.

The rooms of the approval domain, from an incident's opening to its decision or expiry:
- `step`: what a new incident needs once a playbook proposes co-location (pure): nothing, a
  request until a deadline, or an automatic approval.
- `requests`: the approval step applied to the store (request with the deadline, or `auto`).
- `approvers`: the approvers in force for an incident now, and the one rule every decider meets.
- `decision`: the one decision function (approve, reject, snooze), whichever way it comes.
- `expiry`: the leader's job that expires what nobody decided and wakes ended snoozes.

Who uses it: the pipeline's playbook actions (`requests`), the HTTP API, Slack's click handler and
the CLI (`decision` with an `approvers.Authority`), the composition root (`expiry`, the authority).
Adapters stay where their I/O is: the deadline SQL in `agent.store.approval_deadlines`, Slack's user-group
lookups in `agent.chatops.directory` (injected as `approvers.Members`), the HTTP body and status
codes in `agent.runtime.decision_http`, the CLI verbs in `agent.commands.decisions`.

What it does not do: import Slack, HTTP or the cluster client, the runtime, the chat layer or the
commands (the import contracts in pyproject.toml hold it to that), or execute a remediation.
"""
