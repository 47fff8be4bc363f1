"""Which override field the installed Trainer serves, read from its TrainJob CRD: the twin's CRDs
of each release, an upstream-shaped v2.0 CRD (podSpecOverrides), and no CRD at all."""

from __future__ import annotations

from typing import Any

import pytest

from agent.remediation.trainer_release import (
    TRAINJOB_CRD,
    OverrideField,
    TrainerOverrides,
    served_overrides,
)
from agent.twin.crds import TrainerRelease, crd_documents


def twin_crd(release: TrainerRelease) -> dict[str, Any]:
    (crd,) = [c for c in crd_documents(release) if c["metadata"]["name"] == TRAINJOB_CRD]
    return crd


def v20_crd() -> dict[str, Any]:
    """A TrainJob CRD as Trainer v2.0 ships it: `spec.podSpecOverrides`, no later field."""
    crd = twin_crd(TrainerRelease.V2_1)
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    del spec["podTemplateOverrides"]
    spec["podSpecOverrides"] = {"type": "array", "items": {"type": "object"}}
    return crd


@pytest.mark.parametrize(
    ("crd", "field", "together"),
    [
        (twin_crd(TrainerRelease.V2_3), OverrideField.RUNTIME_PATCHES, True),
        (twin_crd(TrainerRelease.V2_2), OverrideField.RUNTIME_PATCHES, False),
        (twin_crd(TrainerRelease.V2_1), OverrideField.POD_TEMPLATE_OVERRIDES, False),
        (v20_crd(), OverrideField.NONE, False),
        (None, OverrideField.NONE, False),
    ],
    ids=["v2.3", "v2.2", "v2.1", "v2.0", "no-trainer"],
)
def test_the_field_and_whether_patch_and_resume_are_one_request(
    crd: dict[str, Any] | None, field: OverrideField, together: bool
) -> None:
    found = served_overrides(crd)
    assert (found.field, found.resume_with_patch) == (field, together)
    assert bool(found.refusal) is (field is OverrideField.NONE)


def test_a_v20_trainer_is_refused_naming_the_releases_that_work() -> None:
    reason = served_overrides(v20_crd()).refusal
    assert "v2.0" in reason and "podSpecOverrides" in reason and "v2.1+" in reason and "v2.2+" in reason


def test_it_survives_its_own_record() -> None:
    found = served_overrides(twin_crd(TrainerRelease.V2_3))
    assert TrainerOverrides.from_dict(found.to_dict()) == found
