"""Playbook directory loading: read `*.yaml` files and parse each with `agent.playbook.schema`.

Called by `zonemedic playbooks check DIR` (reports every bad file) and by the agent at start-up
(`load_playbooks`: the first bad file stops it). The only module of `agent.playbook` that touches the
file system; it evaluates nothing.
"""

from __future__ import annotations

from pathlib import Path

from agent.playbook.model import Playbook
from agent.playbook.schema import PlaybookError, parse_playbook

MAX_PLAYBOOK_BYTES = 1024 * 1024  # a playbook larger than this is refused unread


def check_directory(directory: Path) -> tuple[list[Playbook], list[PlaybookError]]:
    """Parse every `*.yaml`/`*.yml` in `directory`: the good playbooks and one error per bad file."""
    if not directory.is_dir():
        raise PlaybookError(f"{directory}: not a directory")
    playbooks: list[Playbook] = []
    errors: list[PlaybookError] = []
    seen: dict[str, str] = {}
    files = sorted([*directory.glob("*.yaml"), *directory.glob("*.yml")])
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
