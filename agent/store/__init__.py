"""The incident store: `repository.IncidentStore` (the facade callers use, with `open_store`) over
`findings`, `transitions`, `timeline`, `outbox` and `queries` (one transaction body each), `rows`
(row -> dataclass mappers), `schema`/`types` (tables), `migrate`, `retention`, `resilience`, `engine`.
"""
