"""Alertmanager-style label matchers: parse `name="value"`, `name=~"re"`, `!=`, `!~`; evaluate them.

Called by `agent.playbook.schema` (parsing, errors name the matcher) and `agent.playbook.matching`
(evaluation against an alert's labels). Regexes are fully anchored, as in Alertmanager; an absent
label is the empty string. Pure.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from agent.errors import InputError
from agent.playbook.model import LabelMatcher, MatchOp

_MATCHER = re.compile(r'^\s*([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*(.*?)\s*$')


class MatcherError(InputError):
    """A label matcher is malformed."""


def parse_matcher(text: str) -> LabelMatcher:
    match = _MATCHER.match(text)
    if match is None:
        raise MatcherError(f"{text!r} is not a matcher like name=\"value\" or name=~\"regex\"")
    name, op_text, raw = match.groups()
    if len(raw) >= 2 and raw[0] == raw[-1] and raw[0] in "\"'":
        raw = raw[1:-1]
    op = MatchOp(op_text)
    if op in (MatchOp.RE, MatchOp.NRE):
        try:
            re.compile(raw)
        except re.error as exc:
            raise MatcherError(f"{text!r}: bad regular expression: {exc}") from exc
    return LabelMatcher(name=name, op=op, value=raw)


def matches(matcher: LabelMatcher, labels: Mapping[str, str]) -> bool:
    value = labels.get(matcher.name, "")
    if matcher.op is MatchOp.EQ:
        return value == matcher.value
    if matcher.op is MatchOp.NE:
        return value != matcher.value
    found = re.fullmatch(matcher.value, value) is not None
    return found if matcher.op is MatchOp.RE else not found


def matches_all(matchers: tuple[LabelMatcher, ...], labels: Mapping[str, str]) -> bool:
    return all(matches(m, labels) for m in matchers)
