"""The twin's packaged scenarios: which names `--scenario` accepts (files under `scenarios/`).

Read by `agent.twin.scenario` (loading one, naming the known ones in an error) and by the CLI's
parsers (`twin up --help` lists them all), so a scenario added to the folder is offered
everywhere at once. It lists the folder only: no YAML is parsed here, so building the CLI's parser
stays cheap. What it does not do: load or validate a scenario.
"""

from __future__ import annotations

from importlib import resources

GENERATED_PREFIX = "generated"
GENERATED_SPEC = "generated:nodes=N,zones=Z,jobs=J,workers=W,policies=P,seed=S"


def scenario_names() -> list[str]:
    """The packaged scenarios, by name (the file name without `.yaml`), sorted."""
    folder = resources.files("agent.twin") / "scenarios"
    return sorted(p.name[: -len(".yaml")] for p in folder.iterdir() if p.name.endswith(".yaml"))
