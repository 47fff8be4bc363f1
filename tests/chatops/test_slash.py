"""The `/zonemedic` grammar: table tests of what parses and what is refused (with the reason)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from agent.chatops.slash import SlashError, Verb, parse
from agent.model.lifecycle import IncidentStatus
from agent.model.network import PortRange, Protocol

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "verb", "check"),
    [
        ("", Verb.HELP, lambda c: c.query is None),
        ("help", Verb.HELP, lambda c: True),
        ("sweep", Verb.SWEEP, lambda c: True),
        ("show 42", Verb.SHOW, lambda c: c.incident_id == 42),
        ("show #7", Verb.SHOW, lambda c: c.incident_id == 7),
        ("stats", Verb.STATS, lambda c: c.since == NOW - timedelta(days=30) and c.period == "30d"),
        ("stats since 12h", Verb.STATS, lambda c: c.since == NOW - timedelta(hours=12)),
        ("incidents", Verb.INCIDENTS,
         lambda c: c.query.since == NOW - timedelta(days=7) and c.query.namespace is None),
        ("incidents job ml/resnet since 2d status resolved", Verb.INCIDENTS,
         lambda c: (c.query.namespace, c.query.name, c.query.status, c.query.since)
         == ("ml", "resnet", IncidentStatus.RESOLVED, NOW - timedelta(days=2))
         and c.filters == "job ml/resnet, since 2d, status resolved"),
        ("INCIDENTS status open", Verb.INCIDENTS, lambda c: c.query.status is IncidentStatus.OPEN),
        ("explain from ml/w-0 to ml/m-0 port 23456", Verb.EXPLAIN,
         lambda c: (str(c.explain.source), str(c.explain.destination), c.explain.ports)
         == ("ml/w-0", "ml/m-0", PortRange.single(23456))),
        ("explain from ml from-labels app=x from-sa trainer to ml/m-0 port 1", Verb.EXPLAIN,
         lambda c: c.explain.source.service_account == "trainer"),
        ("explain to ml/m-0 port 53/udp from ml from-labels app=x,zone=a", Verb.EXPLAIN,
         lambda c: (c.explain.source.labels, c.explain.ports.protocol)
         == ((("app", "x"), ("zone", "a")), Protocol.UDP)),
    ],
)
def test_parses(text: str, verb: Verb, check: object) -> None:
    command = parse(text, now=NOW, cluster="prod")
    assert command.verb is verb
    assert check(command)  # type: ignore[operator]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("approve 1", "unknown command 'approve'"),
        ("show", "expected one incident number"),
        ("show x", "expected one incident number"),
        ("show 0", "expected one incident number"),
        ("incidents job resnet", "job: expected NAMESPACE/NAME"),
        ("incidents status bogus", "status: unknown value 'bogus'"),
        ("incidents since soon", "since: expected a duration"),
        ("incidents since 0d", "positive age"),
        ("incidents since", "expected pairs"),
        ("incidents colour red", "unknown filter 'colour'"),
        ("incidents since 1d since 2d", "'since' given twice"),
        ("sweep now", "takes no arguments"),
        ("x" * 501, "too long"),
        ("explain from ml/a to ml/b", "`explain`: port: give PORT"),
        ("explain from ml/a to ml/b port 99999", "`explain`: port: '99999' is not a port"),
        ("explain from ml/a to ml/b port 80/gre", "unknown protocol 'gre'"),
        ("explain from ml to ml/b port 80", "from: expected NAMESPACE/POD"),
        ("explain from ml from-labels app to ml/b port 80", "from-labels: expected KEY=VALUE"),
        ("explain from ml/a to ml/b port 80 via x", "unknown filter 'via'"),
    ],
)
def test_refuses_with_the_reason(text: str, message: str) -> None:
    with pytest.raises(SlashError, match=message):
        parse(text, now=NOW)
