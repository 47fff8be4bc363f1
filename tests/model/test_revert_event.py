"""The `fix_reverted` event's detail on each of the two incidents, and the revert's name."""

from __future__ import annotations

from typing import Any

import pytest

from agent.model.revert import Revert, RevertedField

FIELD = RevertedField(kind="Deployment", namespace="ml-lab", name="rendezvous",
                      field="spec.template.metadata.labels.zone", planned="zone-a", now="zone-b",
                      manager="argocd-controller", at="2026-12-03T16:25:21Z")  # fmt: skip
REVERT = Revert(incident_id=1, fields=(FIELD,))
COMMON = {"by": "argocd-controller", "reverted_at": "2026-12-03T16:25:21Z",
          "fields": ["Deployment ml-lab/rendezvous spec.template.metadata.labels.zone"],
          "says": "fix reverted by argocd-controller"}


@pytest.mark.parametrize(("redetected_as", "other"), [
    (None, {"reverted_incident": 1}),  # on the re-detection's incident: whose fix it is
    (2, {"redetected_as": 2}),  # on the fixed incident: where it was seen again
])
def test_event_detail(redetected_as: int | None, other: dict[str, Any]) -> None:
    assert REVERT.event_detail(redetected_as=redetected_as) == {**COMMON, **other}


def test_an_unknown_writer_is_said() -> None:
    unknown = Revert(3, (RevertedField("Job", "ml", "w", "spec.template.spec.tolerations",
                                       [], None, "", ""),))  # fmt: skip
    assert unknown.title() == "fix reverted by an unknown writer"
    assert unknown.event_detail()["by"] == "an unknown writer"
