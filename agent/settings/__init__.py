"""Typed settings: read once from a YAML file plus `ZONEMEDIC_` environment overrides, then passed down.

The package's rooms: `sections` (the typed sections, `Settings` and what it holds), `bounds` (a
key's range, written in its annotation), `builder` (plain data -> a section, every problem named
by key), `loader` (the file and the environment overrides, `load_settings`), `secrets` (what is
never held in `Settings`: the environment's Slack tokens, `read_secret_file`). This module only
re-exports the names the rest of the agent imports (`from agent.settings import Settings`); the
modules of the package import each other directly.
"""

from agent.settings.admission import PATH as ADMISSION_PATH
from agent.settings.admission import AdmissionMode, AdmissionSettings
from agent.settings.builder import build, parse_duration
from agent.settings.loader import load_diagnosis_settings, load_settings
from agent.settings.secrets import EnvironmentSecrets, read_secret_file
from agent.settings.sections import (
    EGRESS_WINDOW_PLACEHOLDER,
    AlertmanagerSettings,
    BasicAuthSettings,
    DatabaseSettings,
    DataplaneSetting,
    DetectionSettings,
    DiagnosisSettings,
    EgressSettings,
    EgressSource,
    GroupSpec,
    HttpSettings,
    KubernetesSettings,
    LeaderElectionSettings,
    NamespaceFilter,
    PrometheusSettings,
    RemediationSettings,
    Settings,
    SlackApprovers,
    SlackMode,
    SlackSettings,
    cilium_release,
)

__all__ = [
    "ADMISSION_PATH",
    "EGRESS_WINDOW_PLACEHOLDER",
    "AdmissionMode",
    "AdmissionSettings",
    "AlertmanagerSettings",
    "BasicAuthSettings",
    "DatabaseSettings",
    "DataplaneSetting",
    "DetectionSettings",
    "DiagnosisSettings",
    "EgressSettings",
    "EgressSource",
    "EnvironmentSecrets",
    "GroupSpec",
    "HttpSettings",
    "KubernetesSettings",
    "LeaderElectionSettings",
    "NamespaceFilter",
    "PrometheusSettings",
    "RemediationSettings",
    "Settings",
    "SlackApprovers",
    "SlackMode",
    "SlackSettings",
    "build",
    "cilium_release",
    "load_diagnosis_settings",
    "load_settings",
    "parse_duration",
    "read_secret_file",
]
