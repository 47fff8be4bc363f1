"""The incident store: `repository.IncidentStore` (the facade callers use, with `open_store`) over
the transaction bodies in `findings`, `transitions`, `approval_deadlines`, `timeline`, `outbox` and
`queries`; `rows` maps rows to dataclasses; `schema`/`types` (tables), `migrate`, `retention`,
`resilience` and `engine` complete it.
"""
