"""The files a Dockerfile's COPY instructions take from the build context, without a Docker daemon.

`context_files(dockerfile, context)` reads the COPY lines that copy from the context (not
`--from=<stage>`), resolves their sources against the context directory and drops what the
context's `.dockerignore` excludes, as Docker's own pattern matcher does: one pattern a line, `#`
comments, `!` re-includes, `*` and `?` within one path element, `**` across any number of them, a
pattern that matches a directory excludes everything under it, and the last matching pattern wins.
It returns `{path in the context: path in the image}`. Used by tests/test_deploy.py. It does not
build anything, nor follow ADD, URLs or globs in COPY sources (the Dockerfile uses none).
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass
from pathlib import Path, PurePosixPath


@dataclass(frozen=True)
class Pattern:
    regex: re.Pattern[str]
    exclude: bool  # False for a `!` exception


def _regex(pattern: str) -> re.Pattern[str]:
    out = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        elif pattern[i] == "[":
            end = pattern.find("]", i + 1)
            if end < 0:
                raise ValueError(f"unterminated character class in {pattern!r}")
            out.append(pattern[i : end + 1])  # Go's [^...] negation is also Python's
            i = end + 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out))


def parse_dockerignore(text: str) -> list[Pattern]:
    patterns = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        exclude = not line.startswith("!")
        line = line.lstrip("!").strip()
        cleaned = str(PurePosixPath("/" + line)).lstrip("/")  # Docker cleans and drops a leading /
        if cleaned:
            patterns.append(Pattern(_regex(cleaned), exclude))
    return patterns


def ignored(path: str, patterns: list[Pattern]) -> bool:
    """Whether `path` (relative, with /) is left out of the context; a directory pattern covers
    everything under it."""
    parts = path.split("/")
    prefixes = ["/".join(parts[: n + 1]) for n in range(len(parts))]
    verdict = False
    for pattern in patterns:
        if any(pattern.regex.fullmatch(p) for p in prefixes):
            verdict = pattern.exclude
    return verdict


def _instructions(text: str) -> list[str]:
    joined = re.sub(r"\\\n", " ", text)
    return [line.strip() for line in joined.splitlines() if line.strip() and not line.strip().startswith("#")]


def context_files(dockerfile: Path, context: Path) -> dict[str, str]:
    ignore_file = context / ".dockerignore"
    patterns = parse_dockerignore(ignore_file.read_text()) if ignore_file.exists() else []
    workdir = PurePosixPath("/")
    files: dict[str, str] = {}
    for line in _instructions(dockerfile.read_text()):
        keyword, _, rest = line.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            workdir = PurePosixPath("/")
        elif keyword == "WORKDIR":
            workdir = workdir / rest.strip()
        if keyword != "COPY":
            continue
        words = json.loads(rest) if rest.lstrip().startswith("[") else shlex.split(rest)
        flags = [w for w in words if w.startswith("--")]
        if any(f.startswith("--from=") for f in flags):
            continue
        *sources, dest = [w for w in words if not w.startswith("--")]
        target = workdir / dest
        for source in sources:
            base = context / source
            if not base.exists():
                raise FileNotFoundError(f"COPY {source}: not in the build context {context}")
            if base.is_dir():
                for path in sorted(p for p in base.rglob("*") if p.is_file()):
                    rel = path.relative_to(context).as_posix()
                    if not ignored(rel, patterns):
                        files[rel] = str(target / path.relative_to(base).as_posix())
            else:
                rel = base.relative_to(context).as_posix()
                if not ignored(rel, patterns):
                    into_dir = dest.endswith("/") or len(sources) > 1
                    files[rel] = str(target / base.name if into_dir else target)
    return files
