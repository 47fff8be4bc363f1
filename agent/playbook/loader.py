"""Playbook directory loading: read `*.yaml` files and parse each with `agent.playbook.schema`.

Called by `zonemedic playbooks check DIR` (reports every bad file), by `zonemedic config check`
(`check_files`, for a ConfigMap's files as the pod will see them) and by the agent at start-up
(`load_playbooks`: the first bad file stops it). `playbooks_directory` resolves the setting
`playbooks_dir`: the directory it names, or, when it is not set, the playbooks shipped with the
package, wherever the installation put them (never a path relative to the working directory).
The only module of `agent.playbook` that touches the file system; it evaluates nothing.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from pathlib import Path

import agent
from agent.playbook.model import Playbook
from agent.playbook.schema import PlaybookError, parse_playbook

MAX_PLAYBOOK_BYTES = 1024 * 1024  # a playbook larger than this is refused unread
IMAGE_PLAYBOOKS = Path("/etc/zonemedic/playbooks")  # where the container image copies them


def shipped_playbook_dirs() -> list[Path]:
    """Where the shipped playbooks may be, in order: `playbooks/` beside the `agent` package (a
    source checkout or an editable install), `<prefix>/share/zonemedic/playbooks` (a wheel install:
    pyproject ships them as data files), and the container image's directory."""
    return [
        Path(agent.__file__).resolve().parent.parent / "playbooks",
        Path(sys.prefix) / "share" / "zonemedic" / "playbooks",
        IMAGE_PLAYBOOKS,
    ]


def playbooks_directory(configured: str | None) -> Path:
    """The directory `playbooks_dir` names (as given: a relative path is the operator's choice),
    or, unset, the first shipped directory that exists; `PlaybookError` naming every place looked
    at when there is none."""
    if configured:
        return Path(configured)
    candidates = shipped_playbook_dirs()
    for candidate in candidates:
        if candidate.is_dir():
            return candidate
    looked = ", ".join(str(c) for c in candidates)
    raise PlaybookError(
        f"no shipped playbooks found (looked in {looked}); set playbooks_dir to their directory"
    )


def check_directory(directory: Path) -> tuple[list[Playbook], list[PlaybookError]]:
    """Parse every `*.yaml`/`*.yml` in `directory`: the good playbooks and one error per bad file."""
    if not directory.is_dir():
        raise PlaybookError(f"{directory}: not a directory")
    return check_files(sorted([*directory.glob("*.yaml"), *directory.glob("*.yml")]))


def check_files(files: Iterable[Path]) -> tuple[list[Playbook], list[PlaybookError]]:
    """Parse each playbook file: the good playbooks and one error per bad file (a name used twice
    is an error on the second file)."""
    playbooks: list[Playbook] = []
    errors: list[PlaybookError] = []
    seen: dict[str, str] = {}
    for path in files:
        try:
            with path.open("rb") as handle:
                raw = handle.read(MAX_PLAYBOOK_BYTES + 1)
            text = raw.decode("utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            errors.append(PlaybookError(f"{path}: cannot read: {exc}"))
            continue
        if len(raw) > MAX_PLAYBOOK_BYTES:
            errors.append(PlaybookError(f"{path}: larger than {MAX_PLAYBOOK_BYTES} bytes"))
            continue
        try:
            playbook = parse_playbook(text, path=path)
        except PlaybookError as exc:
            errors.append(exc)
            continue
        if playbook.name in seen:
            errors.append(
                PlaybookError(f"{path}: name: {playbook.name!r} is already used by {seen[playbook.name]}")
            )
            continue
        seen[playbook.name] = str(path)
        playbooks.append(playbook)
    return playbooks, errors


def load_playbooks(directory: Path) -> list[Playbook]:
    """Load a playbook directory for the agent; the first bad file stops it (PlaybookError)."""
    playbooks, errors = check_directory(directory)
    if errors:
        raise errors[0]
    return playbooks
