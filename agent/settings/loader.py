"""Read the settings once: a YAML file plus `ZONEMEDIC_` environment overrides, built and checked.

Who calls it: the CLI (`load_settings` for `run`, `config check` and the other agent commands;
`load_diagnosis_settings` for `zonemedic diagnose --config`) and the demo, which writes a config
file and reads it as `run` does; every other module receives the section it needs as an argument.
It reads no environment at import time. The file is read up to `MAX_CONFIG_BYTES` through
`agent.parsing.bounded_yaml`; its problems name the file (`c.yaml: line 1: invalid YAML: ...`).

Environment overrides name the key path in upper case with `__` between levels:
`ZONEMEDIC_DATABASE__URL=postgresql+psycopg://...`, `ZONEMEDIC_HTTP__PORT=9090`. Values are parsed as
YAML scalars/flow collections, so `ZONEMEDIC_KUBERNETES__NAMESPACES__INCLUDE='[a, b]'` works.

What it does not do: validate that a URL answers or a file exists (the adapters do that at start),
or hold a secret read from a file (`agent.settings.secrets`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from agent.errors import ConfigError
from agent.parsing import numbers
from agent.parsing.bounded_yaml import YamlLimitError, safe_load, syntax_error
from agent.settings.builder import build
from agent.settings.secrets import EnvironmentSecrets
from agent.settings.sections import DiagnosisSettings, Settings

ENV_PREFIX = "ZONEMEDIC_"

MAX_CONFIG_BYTES = 1024 * 1024  # a configuration file larger than this is refused unread


def read_yaml_mapping(path: Path) -> dict[str, Any]:
    """Read a YAML file that must hold a mapping (or nothing); errors name the file. The file is
    read up to `MAX_CONFIG_BYTES` and parsed through the bounded YAML loader."""
    try:
        with path.open("rb") as handle:
            raw = handle.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read config file: {exc.strerror or exc}") from exc
    if len(raw) > MAX_CONFIG_BYTES:
        raise ConfigError(f"{path}: larger than {MAX_CONFIG_BYTES} bytes, not a config file")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text: {exc.reason} at byte {exc.start}") from None
    try:
        data = safe_load(text)
    except YamlLimitError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    except yaml.YAMLError as exc:
        line, problem = syntax_error(exc, text=text)
        where = f" line {line}" if line is not None else ""
        raise ConfigError(f"{path}:{where} invalid YAML: {problem}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level, got {type(data).__name__}")
    return data


def _apply_env(data: dict[str, Any], environ: Mapping[str, str]) -> dict[str, Any]:
    for name, raw in sorted(environ.items()):
        if not name.startswith(ENV_PREFIX):
            continue
        path = [p.lower() for p in name[len(ENV_PREFIX) :].split("__") if p]
        if not path:
            continue
        try:
            value = safe_load(raw) if raw != "" else ""
        except YamlLimitError as exc:
            raise ConfigError(f"{name}: {exc.problem}") from None
        except yaml.YAMLError:
            raise ConfigError(f"{name}: cannot parse value {numbers.shown(raw)}") from None
        node = data
        for part in path[:-1]:
            child = node.get(part)
            if child is None:
                child = {}
                node[part] = child
            if not isinstance(child, dict):
                raise ConfigError(f"{name}: {part} is not a section")
            node = child
        node[path[-1]] = value
    return data


def load_settings(path: Path | None, environ: Mapping[str, str] | None = None) -> Settings:
    """Read the agent's settings once: the file (if any), then environment overrides."""
    data: dict[str, Any] = read_yaml_mapping(path) if path is not None else {}
    if environ:
        data = _apply_env(data, environ)
    settings = build(Settings, data)
    return dataclasses.replace(settings, secrets=EnvironmentSecrets.from_environ(environ or {}))


def load_diagnosis_settings(path: Path | None) -> DiagnosisSettings:
    """Read a `zonemedic diagnose --config` file: the keys of the agent's `diagnosis:` section,
    bare or under `diagnosis:` (an agent configuration file, whose other sections are validated
    as `load_settings` does and otherwise ignored). Both at once is refused, naming the keys."""
    data = read_yaml_mapping(path) if path is not None else {}
    if "diagnosis" not in data:
        return build(DiagnosisSettings, data)
    bare = sorted(str(k) for k in data if str(k) in _field_names(DiagnosisSettings))
    if bare:
        raise ConfigError(
            f"{path}: diagnosis keys both at the top level ({', '.join(bare)}) and under "
            "diagnosis:; write them in one place"
        )
    return build(Settings, data).diagnosis


def _field_names(cls: type[Any]) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}
