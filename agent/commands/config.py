"""`zonemedic config check FILE`: validate a configuration the way `zonemedic run` does, changing nothing.

Reads the file and the `ZONEMEDIC_` environment overrides (as `run` does), builds the typed settings
and loads the playbook directory they name. Exit 0 with one `ok` line (then one `note:` line per
path that exists only in the pod; and a warning line on stderr when the Alertmanager webhook takes
alerts without credentials), or exit 2 with every problem on its own line on stderr, each
naming its key (`http.port: must be at most 65535, got 70000`) or playbook file and line.

A configuration shipped in a kustomization (`deploy/base/config.yaml`: the kustomization beside it
packs it into the ConfigMap a Deployment mounts) names paths as the pod sees them. Those paths are
checked against the pod's layout as the Deployment mounts them (`agent.commands.pod_layout`): a
playbook directory that is a ConfigMap generated from repository files is checked as those files,
a file in a ConfigMap must be one of its keys, and a path on a Secret or an emptyDir is reported
as existing only in the pod (a note, not a failure). Any other path is checked on this machine.

`zonemedic run` and `sweep` call `validated_settings` before they touch anything, so a
configuration `config check` accepts outside a kustomization is one `run` starts with. Called by
`agent.cli`. What it does not do: reach the database, the cluster, Prometheus or Slack, or read
the files the settings name (but the playbooks).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from operator import attrgetter
from pathlib import Path, PurePosixPath
from typing import Any

from agent.commands.pod_layout import Mount, MountKind, PodLayout, read_pod_layout
from agent.errors import ConfigError
from agent.parsing.printable import printable
from agent.playbook.loader import check_directory, check_files, playbooks_directory
from agent.playbook.model import Playbook
from agent.playbook.schema import PlaybookError
from agent.settings import Settings, load_settings

# The settings that name a file or directory, checked against the pod's layout when there is one.
PATH_SETTINGS = (
    "playbooks_dir",
    "data_dir",
    "kubernetes.kubeconfig",
    "prometheus.bearer_token_file",
    "prometheus.ca_file",
    "database.migrations_dir",
    "http.api_token_file",
    "slack.bot_token_file",
    "slack.signing_secret_file",
    "slack.app_token_file",
    "admission.cert_file",
    "admission.key_file",
)


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "config", help="work with the agent's configuration (check a file)"
    )
    sub = parser.add_subparsers(dest="config_command", metavar="SUBCOMMAND")
    sub.required = True
    check = sub.add_parser(
        "check",
        help="validate FILE (and ZONEMEDIC_ overrides, and its playbooks) without touching anything",
        description="Validate FILE as `zonemedic run` would, touching nothing. Paths of a "
        "configuration shipped in a kustomization (deploy/base/config.yaml) are checked against "
        "the pod's layout as its Deployment mounts them.",
    )
    check.add_argument("file", metavar="FILE", type=Path)
    check.set_defaults(handler=run)


@dataclass(frozen=True)
class CheckedConfig:
    """What `config check` found: the settings, the playbooks and where they were read, and the
    paths that exist only in the pod."""

    settings: Settings
    playbooks: list[Playbook]
    playbooks_from: str
    notes: tuple[str, ...] = ()


def validated_settings(
    path: Path | None, environ: Mapping[str, str]
) -> tuple[Settings, list[Playbook]]:
    """The settings and playbooks `run` would use; `ConfigError` listing every problem otherwise."""
    settings = load_settings(path, environ)  # lists every bad key at once
    playbooks, _, errors = _local_playbooks(settings)
    if errors:
        raise ConfigError(*(str(e) for e in errors))
    return settings, playbooks


def _local_playbooks(settings: Settings) -> tuple[list[Playbook], str, list[PlaybookError]]:
    try:
        directory = playbooks_directory(settings.playbooks_dir)
        playbooks, errors = check_directory(directory)
    except PlaybookError as exc:
        return [], "", [PlaybookError(f"playbooks_dir: {exc}")]
    return playbooks, str(directory), errors


def _shown(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _pod_playbooks(
    value: str, mount: Mount, layout: PodLayout
) -> tuple[list[Playbook], str, list[PlaybookError]]:
    if PurePosixPath(value) != mount.path or mount.sub_path is not None:
        return [], "", [PlaybookError(
            f"playbooks_dir: {value}: in the pod this is inside {mount.describe()}, which holds "
            f"files, not a directory of playbooks (set it to {mount.path})")]
    files = [f for key, f in sorted(mount.files.items()) if key.endswith((".yaml", ".yml"))]
    playbooks, errors = check_files(files)
    parents = {f.parent for f in files}
    if len(parents) == 1:
        shown = f"{len(files)} file(s) of {_shown(parents.pop())}/"
    else:
        shown = ", ".join(_shown(f) for f in files) or "no *.yaml files"
    return playbooks, (f"{value} (in the pod: ConfigMap {mount.source} generated by "
                       f"{_shown(layout.kustomization)} from {shown})"), errors


def _pod_path(key: str, value: str, mount: Mount) -> tuple[str | None, str | None]:
    """(problem, note) for a path the pod's layout holds."""
    if mount.kind is MountKind.CONFIG_MAP and mount.files:
        relative = PurePosixPath(value).relative_to(mount.path)
        wanted = mount.sub_path if str(relative) == "." and mount.sub_path else str(relative)
        if wanted in mount.files:
            return None, None
        if str(relative) == ".":
            return None, f"{key} {value}: in the pod, {mount.describe()}"
        known = ", ".join(sorted(mount.files)) or "none"
        return (f"{key}: {value}: not in the pod: {mount.describe()} has no key {wanted!r} "
                f"(its keys: {known})"), None
    return None, f"{key} {value}: exists only in the pod ({mount.describe()})"


def check_config(path: Path, environ: Mapping[str, str]) -> CheckedConfig:
    """Everything `config check` reports; `ConfigError` listing every problem otherwise."""
    settings = load_settings(path, environ)
    layout = read_pod_layout(path)
    problems: list[str] = []
    notes: list[str] = []
    pod_playbooks: Mount | None = None
    for key in PATH_SETTINGS:
        value = attrgetter(key)(settings)
        mount = layout.mount_of(value) if layout is not None and value else None
        if mount is None:
            continue
        if key == "playbooks_dir" and mount.kind is MountKind.CONFIG_MAP and mount.files:
            pod_playbooks = mount
            continue
        problem, note = _pod_path(key, value, mount)
        problems.extend([problem] if problem else [])
        notes.extend([note] if note else [])
    if pod_playbooks is not None and layout is not None:
        playbooks, where, errors = _pod_playbooks(settings.playbooks_dir or "", pod_playbooks,
                                                  layout)
    elif layout is not None and settings.playbooks_dir and layout.mount_of(settings.playbooks_dir):
        playbooks, where, errors = [], f"{settings.playbooks_dir} (in the pod only)", []
    else:
        playbooks, where, errors = _local_playbooks(settings)
    problems.extend(str(e) for e in errors)
    if problems:
        raise ConfigError(*problems)
    return CheckedConfig(settings, playbooks, where, tuple(notes))


def run(args: argparse.Namespace) -> int:
    try:
        checked = check_config(args.file, os.environ)
    except ConfigError as exc:
        for problem in exc.problems:
            print(f"zonemedic: error: {printable(problem)}", file=sys.stderr)
        return 2
    from agent.runtime.webhook_credentials import open_warning

    open_webhook = open_warning(checked.settings.alertmanager)
    if open_webhook is not None:
        print(f"zonemedic: warning: alertmanager: {open_webhook}", file=sys.stderr)
    print(printable(
        f"ok  {args.file}: cluster {checked.settings.cluster_name}, {len(checked.playbooks)} "
        f"playbook(s) from {checked.playbooks_from}"
    ))
    for note in checked.notes:
        print(printable(f"note: {note}"))
    return 0
