"""Playbook schema: read `playbooks/*.yaml` into `Playbook`s, naming file, line and field on errors.

Called by `agent.playbook.loader` (which reads the files) for `zonemedic playbooks check DIR` and
the agent's start-up.
The YAML is composed into nodes first so every error carries the line of the offending node
(`zone-split.yaml:7: actions[0].approval.expiry: expected a duration like 4h, got 'soon'`). It reads
no files and evaluates nothing: matching lives in `agent.playbook.matching`.

Format (one playbook per file):

    name: zone-split
    description: ...
    enabled: true
    triggers:                      # any one fires the playbook
      - type: zone_split            # zone_split | policy_blocked | zone_label_mismatch |
                                    # gpu_utilization_drop
      - type: alert                 # label matchers, Alertmanager syntax, all must match
        matchers: ['alertname="GPUUtilizationLow"', 'severity=~"warning|critical"']
      - type: schedule
        cron: "0 8 * * 1-5"         # UTC
    conditions:                    # all must hold
      namespaces: {include: [ml], exclude: [ml-scratch]}   # or a plain list (= include)
      job_kinds: [PyTorchJob, TFJob]
      labels: {team: vision}
      min_gpus: 8
      verdicts: [zone_split_blocked, zone_split_degraded]
    actions:
      - type: notify
        channel: "#ml-infra"
      - type: propose_colocation
        approval: {approvers: [U012AB3CD], expiry: 4h, auto_namespaces: [ml-sandbox]}
        # expiry absent: the agent's slack.approval_ttl (30m by default)
      - type: digest
        channel: "#ml-infra"
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

import yaml

from agent.errors import ConfigError, InputError
from agent.model.workload import JobKind
from agent.parsing.bounded_yaml import YamlLimitError, check_yaml, syntax_error
from agent.parsing.member import member
from agent.parsing.numbers import NumberError, parse_int
from agent.parsing.printable import printable
from agent.playbook.cron import parse_cron
from agent.playbook.matchers import parse_matcher
from agent.playbook.model import (
    Action,
    ApprovalPolicy,
    Conditions,
    Playbook,
    PlaybookActionKind,
    Trigger,
    TriggerKind,
)
from agent.settings import parse_duration

MAX_GPUS = 1_000_000  # conditions.min_gpus: far above any job, far below an overflow
JOB_KINDS = tuple(k.value for k in JobKind)  # the training kinds of the workload table, Group
VERDICTS = (
    "healthy",
    "pending",
    "policy_blocked",
    "zone_label_mismatch",
    "zone_split_blocked",
    "zone_split_degraded",
    "gpu_utilization_drop",
)

T = TypeVar("T")


class PlaybookError(InputError):
    """A playbook is invalid; the message is `FILE:LINE: FIELD: what is wrong`."""


class _Reader:
    """Walks composed YAML nodes of one file, converting scalars and raising located errors."""

    def __init__(self, path: Path, text: str) -> None:
        self.path = path
        self.loader = yaml.SafeLoader(text)

    def close(self) -> None:
        self.loader.dispose()

    def error(self, node: yaml.Node | None, field: str, message: str) -> PlaybookError:
        line = f"{node.start_mark.line + 1}:" if node is not None else ""
        where = f" {field}:" if field else ""
        return PlaybookError(f"{self.path}:{line}{where} {message}")

    def scalar(self, node: yaml.Node, field: str = "") -> Any:
        """The node's value; a tag no safe constructor knows (`!0`, `!!python/name`) is a located
        error like any other bad value."""
        try:
            return self.loader.construct_object(node, deep=True)
        except yaml.YAMLError as exc:
            _, problem = syntax_error(exc)
            raise self.error(node, field, f"invalid YAML: {printable(problem)}") from None

    def mapping(self, node: yaml.Node, field: str, known: tuple[str, ...]) -> dict[str, yaml.Node]:
        if not isinstance(node, yaml.MappingNode):
            raise self.error(node, field, "expected a mapping")
        out: dict[str, yaml.Node] = {}
        for key_node, value_node in node.value:
            key = self.scalar(key_node, field)
            sub = member(field, str(key))
            if not isinstance(key, str) or key not in known:
                raise self.error(key_node, sub, f"unknown field (known: {', '.join(known)})")
            if key in out:
                raise self.error(key_node, sub, "duplicate field")
            out[key] = value_node
        return out

    def sequence(self, node: yaml.Node, field: str) -> list[yaml.Node]:
        if not isinstance(node, yaml.SequenceNode):
            raise self.error(node, field, "expected a list")
        return list(node.value)

    def string(self, node: yaml.Node, field: str) -> str:
        value = self.scalar(node, field) if isinstance(node, yaml.ScalarNode) else None
        if not isinstance(value, str) or not value:
            raise self.error(node, field, "expected a non-empty string")
        return value

    def strings(self, node: yaml.Node, field: str) -> tuple[str, ...]:
        return tuple(
            self.string(item, f"{field}[{i}]") for i, item in enumerate(self.sequence(node, field))
        )

    def choice(self, node: yaml.Node, field: str, allowed: tuple[str, ...]) -> str:
        value = self.string(node, field)
        if value not in allowed:
            raise self.error(node, field, f"{value!r} is not one of {', '.join(allowed)}")
        return value

    def integer(self, node: yaml.Node, field: str, *, minimum: int = 0, maximum: int) -> int:
        value = self.scalar(node, field) if isinstance(node, yaml.ScalarNode) else None
        if not isinstance(value, int) or isinstance(value, bool):
            raise self.error(node, field, f"expected an integer from {minimum} to {maximum}")
        try:
            return parse_int(value, field=field, minimum=minimum, maximum=maximum)
        except NumberError as exc:
            raise self.error(node, field, str(exc).removeprefix(f"{field}: ")) from None

    def boolean(self, node: yaml.Node, field: str) -> bool:
        value = self.scalar(node, field) if isinstance(node, yaml.ScalarNode) else None
        if not isinstance(value, bool):
            raise self.error(node, field, "expected true or false")
        return value

    def duration(self, node: yaml.Node, field: str) -> timedelta:
        value = self.scalar(node, field) if isinstance(node, yaml.ScalarNode) else None
        try:
            return parse_duration(value, key=field)
        except ConfigError as exc:
            raise self.error(node, field, str(exc).removeprefix(f"{field}: ")) from exc

    def checked(self, node: yaml.Node, field: str, parse: Callable[[str], T]) -> T:
        text = self.string(node, field)
        try:
            return parse(text)
        except InputError as exc:
            raise self.error(node, field, str(exc)) from exc


def _trigger(r: _Reader, node: yaml.Node, field: str) -> Trigger:
    fields = r.mapping(node, field, ("type", "matchers", "cron"))
    if "type" not in fields:
        raise r.error(node, f"{field}.type", "required field is missing")
    kind = TriggerKind(r.choice(fields["type"], f"{field}.type", tuple(TriggerKind)))
    extra = {"matchers"} if kind is TriggerKind.ALERT else set()
    extra |= {"cron"} if kind is TriggerKind.SCHEDULE else set()
    for name, value in fields.items():
        if name != "type" and name not in extra:
            raise r.error(value, f"{field}.{name}", f"not allowed on a {kind} trigger")
    if kind is TriggerKind.ALERT:
        if "matchers" not in fields:
            raise r.error(node, f"{field}.matchers", "required for an alert trigger")
        items = r.sequence(fields["matchers"], f"{field}.matchers")
        if not items:
            raise r.error(fields["matchers"], f"{field}.matchers", "needs at least one matcher")
        matchers = tuple(
            r.checked(item, f"{field}.matchers[{i}]", parse_matcher) for i, item in enumerate(items)
        )
        return Trigger(kind=kind, matchers=matchers)
    if kind is TriggerKind.SCHEDULE:
        if "cron" not in fields:
            raise r.error(node, f"{field}.cron", "required for a schedule trigger")
        r.checked(fields["cron"], f"{field}.cron", parse_cron)
        return Trigger(kind=kind, cron=r.string(fields["cron"], f"{field}.cron"))
    return Trigger(kind=kind)


def _conditions(r: _Reader, node: yaml.Node) -> Conditions:
    field = "conditions"
    fields = r.mapping(node, field, ("namespaces", "job_kinds", "labels", "min_gpus", "verdicts"))
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    if "namespaces" in fields:
        ns = fields["namespaces"]
        if isinstance(ns, yaml.SequenceNode):
            include = r.strings(ns, f"{field}.namespaces")
        else:
            parts = r.mapping(ns, f"{field}.namespaces", ("include", "exclude"))
            if "include" in parts:
                include = r.strings(parts["include"], f"{field}.namespaces.include")
            if "exclude" in parts:
                exclude = r.strings(parts["exclude"], f"{field}.namespaces.exclude")
    kinds: tuple[str, ...] = ()
    if "job_kinds" in fields:
        items = r.sequence(fields["job_kinds"], f"{field}.job_kinds")
        kinds = tuple(
            r.choice(item, f"{field}.job_kinds[{i}]", JOB_KINDS) for i, item in enumerate(items)
        )
    labels: tuple[tuple[str, str], ...] = ()
    if "labels" in fields:
        node_labels = fields["labels"]
        if not isinstance(node_labels, yaml.MappingNode):
            raise r.error(node_labels, f"{field}.labels", "expected a mapping of label -> value")
        pairs = []
        for key_node, value_node in node_labels.value:
            key = r.string(key_node, f"{field}.labels")
            value = r.scalar(value_node)
            if not isinstance(value, str):
                raise r.error(value_node, f"{field}.labels.{key}", "expected a string value")
            pairs.append((key, value))
        labels = tuple(pairs)
    min_gpus = (
        r.integer(fields["min_gpus"], f"{field}.min_gpus", maximum=MAX_GPUS)
        if "min_gpus" in fields
        else 0
    )
    verdicts: tuple[str, ...] = ()
    if "verdicts" in fields:
        items = r.sequence(fields["verdicts"], f"{field}.verdicts")
        verdicts = tuple(
            r.choice(item, f"{field}.verdicts[{i}]", VERDICTS) for i, item in enumerate(items)
        )
    return Conditions(
        namespaces_include=include,
        namespaces_exclude=exclude,
        job_kinds=kinds,
        labels=labels,
        min_gpus=min_gpus,
        verdicts=verdicts,
    )


def _approval(r: _Reader, node: yaml.Node, field: str) -> ApprovalPolicy:
    fields = r.mapping(node, field, ("approvers", "expiry", "auto_namespaces"))
    approvers = r.strings(fields["approvers"], f"{field}.approvers") if "approvers" in fields else ()
    auto = (
        r.strings(fields["auto_namespaces"], f"{field}.auto_namespaces")
        if "auto_namespaces" in fields
        else ()
    )
    expiry = r.duration(fields["expiry"], f"{field}.expiry") if "expiry" in fields else None
    if expiry is not None and expiry <= timedelta(0):
        raise r.error(fields["expiry"], f"{field}.expiry", "must be longer than 0s")
    return ApprovalPolicy(approvers=approvers, expiry=expiry, auto_namespaces=auto)


def _action(r: _Reader, node: yaml.Node, field: str) -> Action:
    fields = r.mapping(node, field, ("type", "channel", "approval"))
    if "type" not in fields:
        raise r.error(node, f"{field}.type", "required field is missing")
    kind = PlaybookActionKind(r.choice(fields["type"], f"{field}.type", tuple(PlaybookActionKind)))
    if "approval" in fields and kind is not PlaybookActionKind.PROPOSE_COLOCATION:
        raise r.error(fields["approval"], f"{field}.approval", f"not allowed on a {kind} action")
    channel = r.string(fields["channel"], f"{field}.channel") if "channel" in fields else None
    approval = None
    if kind is PlaybookActionKind.PROPOSE_COLOCATION:
        approval = (
            _approval(r, fields["approval"], f"{field}.approval")
            if "approval" in fields
            else ApprovalPolicy()
        )
    return Action(kind=kind, channel=channel, approval=approval)


def _invalid_yaml(path: Path, exc: yaml.YAMLError, text: str) -> PlaybookError:
    """`FILE:LINE: invalid YAML: problem`, one line whatever PyYAML's error says."""
    line, problem = syntax_error(exc, text=text)
    where = f"{line}:" if line is not None else ""
    return PlaybookError(f"{path}:{where} invalid YAML: {problem}")


def parse_playbook(text: str, *, path: Path) -> Playbook:
    """Parse one playbook file's text; raise PlaybookError naming file, line and field."""
    try:
        check_yaml(text)
        # the loader reads the text when it is built: a character YAML forbids (NUL, ESC, ...)
        # is a ReaderError here, a bad file like any other
        reader = _Reader(path, text)
    except YamlLimitError as exc:
        raise PlaybookError(f"{path}:{exc.line}: {exc.problem}") from None
    except yaml.YAMLError as exc:
        raise _invalid_yaml(path, exc, text) from None
    try:
        try:
            root = reader.loader.get_single_node()
        except yaml.YAMLError as exc:
            raise _invalid_yaml(path, exc, text) from None
        if root is None:
            raise PlaybookError(f"{path}: empty file")
        fields = reader.mapping(
            root, "", ("name", "description", "enabled", "triggers", "conditions", "actions")
        )
        for required in ("name", "triggers", "actions"):
            if required not in fields:
                raise reader.error(root, required, "required field is missing")
        name = reader.string(fields["name"], "name")
        description = (
            reader.string(fields["description"], "description") if "description" in fields else ""
        )
        enabled = reader.boolean(fields["enabled"], "enabled") if "enabled" in fields else True
        trigger_nodes = reader.sequence(fields["triggers"], "triggers")
        if not trigger_nodes:
            raise reader.error(fields["triggers"], "triggers", "needs at least one trigger")
        triggers = tuple(
            _trigger(reader, n, f"triggers[{i}]") for i, n in enumerate(trigger_nodes)
        )
        action_nodes = reader.sequence(fields["actions"], "actions")
        if not action_nodes:
            raise reader.error(fields["actions"], "actions", "needs at least one action")
        actions = tuple(_action(reader, n, f"actions[{i}]") for i, n in enumerate(action_nodes))
        conditions = (
            _conditions(reader, fields["conditions"]) if "conditions" in fields else Conditions()
        )
    finally:
        reader.close()
    return Playbook(
        name=name,
        source=str(path),
        triggers=triggers,
        actions=actions,
        conditions=conditions,
        description=description,
        enabled=enabled,
    )
