"""The pod's file layout, read from the kustomization a configuration ships in.

A configuration kept beside a kustomization that packs it into a ConfigMap (the repository's
`deploy/base/config.yaml`) names paths as the agent's container sees them: `/etc/zonemedic/playbooks`
is the ConfigMap `zonemedic-playbooks`, `/etc/zonemedic/slack/...` a Secret, `/var/lib/zonemedic` an
emptyDir. `read_pod_layout(config)` reads that kustomization (`kustomization.yaml`, `.yml` or
`Kustomization` in the config file's directory), the resources it lists (files, and directories
holding their own kustomization, whose ConfigMap generators count too), finds the Deployment that
mounts the config's ConfigMap, and returns that container's mounts, each with what fills it: a
ConfigMap generated from repository files (key -> the file), a Secret, an emptyDir or another
volume. `PodLayout.mount_of(path)` says which mount holds a path.

Who calls it: `zonemedic config check` (`agent.commands.config`), which checks a ConfigMap's
files where the repository keeps them and reports Secret and emptyDir paths as existing only in
the pod. What it does not do: run kustomize (no overlays, patches or name suffixes; generated
names are matched without their hash), or read a Secret.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

from agent.errors import ConfigError
from agent.parsing.bounded_yaml import YamlLimitError, safe_load_all

KUSTOMIZATION_NAMES = ("kustomization.yaml", "kustomization.yml", "Kustomization")
MAX_DEPTH = 4  # resource directories followed at most this deep
MAX_FILE_BYTES = 1024 * 1024


class MountKind(StrEnum):
    CONFIG_MAP = "ConfigMap"
    SECRET = "Secret"
    EMPTY_DIR = "emptyDir"
    OTHER = "volume"


@dataclass(frozen=True)
class Mount:
    """One volume mount of the agent's container."""

    path: PurePosixPath
    volume: str
    kind: MountKind
    source: str = ""  # the ConfigMap's or Secret's name
    optional: bool = False
    # ConfigMap only: key -> the repository file its generator reads (empty: not generated here)
    files: Mapping[str, Path] = field(default_factory=dict)
    sub_path: str | None = None  # the one key mounted as a file

    def describe(self) -> str:
        what = f"{self.kind.value} {self.source}".strip() if self.source else self.kind.value
        if self.kind in (MountKind.EMPTY_DIR, MountKind.OTHER):
            what = f"{self.kind.value} volume {self.volume}"
        return f"{what} mounted at {self.path}" + (", optional" if self.optional else "")


@dataclass(frozen=True)
class PodLayout:
    """The mounts of the container that reads the configuration."""

    kustomization: Path
    deployment: str
    container: str
    mounts: tuple[Mount, ...]

    def mount_of(self, path: str) -> Mount | None:
        """The mount holding `path` (the deepest one), or None when no mount does."""
        target = PurePosixPath(path)
        best: Mount | None = None
        for mount in self.mounts:
            if (target == mount.path or mount.path in target.parents) and (
                best is None or len(mount.path.parts) > len(best.path.parts)
            ):
                best = mount
        return best


def _kustomization_in(directory: Path) -> Path | None:
    for name in KUSTOMIZATION_NAMES:
        candidate = directory / name
        if candidate.is_file():
            return candidate
    return None


def _documents(path: Path) -> list[Any]:
    try:
        with path.open("rb") as handle:
            raw = handle.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if len(raw) > MAX_FILE_BYTES:
        raise ConfigError(f"{path}: larger than {MAX_FILE_BYTES} bytes")
    try:
        return [d for d in safe_load_all(raw) if d is not None]
    except YamlLimitError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: invalid YAML: {exc}") from None


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


@dataclass
class _Collected:
    generators: dict[str, dict[str, Path]] = field(default_factory=dict)  # ConfigMap -> key -> file
    deployments: list[Mapping[str, Any]] = field(default_factory=list)


def _generator_files(entry: Mapping[str, Any], directory: Path) -> dict[str, Path]:
    files: dict[str, Path] = {}
    for item in _list(entry.get("files")):
        if not isinstance(item, str):
            continue
        key, sep, source = item.partition("=")
        if not sep:
            key, source = Path(item).name, item
        files[key] = (directory / source).resolve()
    return files


def _collect(kustomization: Path, into: _Collected, depth: int = 0) -> None:
    directory = kustomization.parent
    docs = _documents(kustomization)
    spec = _mapping(docs[0] if docs else None)
    for raw in _list(spec.get("configMapGenerator")):
        entry = _mapping(raw)
        name = entry.get("name")
        if isinstance(name, str):
            into.generators.setdefault(name, {}).update(_generator_files(entry, directory))
    for resource in _list(spec.get("resources")):
        if not isinstance(resource, str) or "://" in resource:
            continue
        path = (directory / resource).resolve()
        if path.is_dir():
            nested = _kustomization_in(path)
            if nested is not None and depth < MAX_DEPTH:
                _collect(nested, into, depth + 1)
        elif path.is_file():
            for doc in _documents(path):
                if _mapping(doc).get("kind") == "Deployment":
                    into.deployments.append(doc)


def _config_map_of(config: Path, generators: Mapping[str, Mapping[str, Path]]) -> str | None:
    wanted = config.resolve()
    for name, files in generators.items():
        if wanted in files.values():
            return name
    return None


def _pod_spec(deployment: Mapping[str, Any]) -> Mapping[str, Any]:
    return _mapping(_mapping(_mapping(deployment.get("spec")).get("template")).get("spec"))


def _mount(
    raw: Mapping[str, Any],
    volume: Mapping[str, Any],
    generators: Mapping[str, Mapping[str, Path]],
) -> Mount:
    path = PurePosixPath(str(raw.get("mountPath", "")))
    name = str(raw.get("name", ""))
    sub_path = raw.get("subPath") if isinstance(raw.get("subPath"), str) else None
    if "configMap" in volume:
        source = _mapping(volume["configMap"])
        cm = str(source.get("name", ""))
        files = dict(generators.get(cm, {}))
        items = [_mapping(i) for i in _list(source.get("items"))]
        if items:  # only the listed keys, under the paths the items give
            files = {str(i.get("path")): files[str(i.get("key"))] for i in items
                     if str(i.get("key")) in files}
        return Mount(path, name, MountKind.CONFIG_MAP, cm, bool(source.get("optional")), files,
                     sub_path)
    if "secret" in volume:
        source = _mapping(volume["secret"])
        return Mount(path, name, MountKind.SECRET, str(source.get("secretName", "")),
                     bool(source.get("optional")), sub_path=sub_path)
    if "emptyDir" in volume:
        return Mount(path, name, MountKind.EMPTY_DIR, sub_path=sub_path)
    return Mount(path, name, MountKind.OTHER, sub_path=sub_path)


def _containers(spec: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    for container in _list(spec.get("containers")):
        yield _mapping(container)


def read_pod_layout(config: Path) -> PodLayout | None:
    """The layout of the pod that reads `config`, or None when no kustomization beside it packs
    the file into a ConfigMap a Deployment mounts. `ConfigError` names a kustomization or
    resource file that cannot be read."""
    kustomization = _kustomization_in(config.resolve().parent)
    if kustomization is None:
        return None
    collected = _Collected()
    _collect(kustomization, collected)
    config_map = _config_map_of(config, collected.generators)
    if config_map is None:
        return None
    for deployment in collected.deployments:
        spec = _pod_spec(deployment)
        volumes = {str(_mapping(v).get("name")): _mapping(v) for v in _list(spec.get("volumes"))}
        for container in _containers(spec):
            mounts = [_mapping(m) for m in _list(container.get("volumeMounts"))]
            reads_config = any(
                _mapping(volumes.get(str(m.get("name")), {}).get("configMap")).get("name")
                == config_map
                for m in mounts
            )
            if not reads_config:
                continue
            return PodLayout(
                kustomization=kustomization,
                deployment=str(_mapping(deployment.get("metadata")).get("name", "")),
                container=str(container.get("name", "")),
                mounts=tuple(
                    _mount(m, volumes.get(str(m.get("name")), {}), collected.generators)
                    for m in mounts
                ),
            )
    return None
