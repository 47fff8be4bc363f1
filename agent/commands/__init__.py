"""One module per `zonemedic` sub-command: each exposes `register(subparsers)` and `run(args)`.

Commands are adapters: they read files and settings, call the core or the runtime, print results.
The twin's commands live in `agent.twin.command` so that nothing here imports the twin.
"""
