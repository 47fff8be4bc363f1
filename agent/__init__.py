"""zonemedic: finds GPU training jobs split across availability zones and fixes them on approval.

The package is layered: a pure core (`model`, `topology`, `policy`, `diagnosis`) with no I/O, thin
adapters around it (`sources`, `store`, `chatops`, `remediation.writer`), the approval domain in
`approval`, a composition root in
`runtime`, the command line in `cli` and `commands`, and the cluster twin in `twin` (imported only by
the CLI and tests). import-linter enforces these layers (see pyproject.toml).
"""

__version__ = "0.1.0"
