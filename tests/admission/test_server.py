"""The webhook over real HTTPS: AdmissionReview in and out, records, dry runs, bad bodies, rotation."""

from __future__ import annotations

import base64
import json
import shutil
import socket
import ssl
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from agent.admission.certificates import make_certificate, write_pair
from agent.admission.jsonpatch import apply
from agent.admission.review import review_request
from agent.model.admission import AdmissionOutcome, AdmissionQuery
from agent.settings import AdmissionMode, AdmissionSettings, Settings
from agent.store.repository import IncidentStore
from tests.support import objects as o
from tests.support.admission import SETTINGS, Served, base_items, make_view, pytorch, serve
from tests.support.waiting import wait


def review_of(obj: dict[str, Any], *, uid: str = "req-1", dry_run: bool = False) -> dict[str, Any]:
    return review_request(obj, uid=uid, group="kubeflow.org", version="v1", kind="PyTorchJob",
                          resource="pytorchjobs", namespace="ml", dry_run=dry_run)  # fmt: skip


def test_a_create_is_answered_with_the_patch_and_a_warning_and_recorded(
    served: Served, store: IncidentStore,
) -> None:
    obj = pytorch()
    status, answer = served.post(review_of(obj))
    assert status == 200
    assert answer["apiVersion"] == "admission.k8s.io/v1" and answer["kind"] == "AdmissionReview"
    response = answer["response"]
    assert response["uid"] == "req-1" and response["allowed"] is True
    assert response["patchType"] == "JSONPatch"
    patched = apply(obj, json.loads(base64.b64decode(response["patch"])))
    master = patched["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    assert master["nodeSelector"] == {"topology.kubernetes.io/zone": "a"}
    (warning,) = response["warnings"]
    assert warning.startswith("zonemedic: pinned PyTorchJob ml/llm to zone a")
    assert served.counts == {"placed": 1}
    served.webhook.records.flush()  # type: ignore[union-attr]
    (record,) = store.list_admissions()
    assert (record.outcome, record.zone, record.request_uid) == (AdmissionOutcome.PLACED, "a", "req-1")
    assert (record.job_kind, record.job_namespace, record.job_name) == ("PyTorchJob", "ml", "llm")
    assert record.warning == warning


def test_a_dry_run_is_answered_alike_and_records_nothing(served: Served, store: IncidentStore) -> None:
    status, answer = served.post(review_of(pytorch(), uid="dry", dry_run=True))
    assert status == 200 and answer["response"]["patchType"] == "JSONPatch"
    served.post(review_of(pytorch(name="real"), uid="real"))
    served.webhook.records.flush()  # type: ignore[union-attr]
    assert [r.request_uid for r in store.list_admissions()] == ["real"]
    assert served.counts == {"placed": 2}


def test_an_unchanged_job_gets_no_patch_and_says_why(served: Served) -> None:
    _, answer = served.post(review_of(pytorch(workers=0)))
    response = answer["response"]
    assert "patch" not in response and "patchType" not in response
    assert response["warnings"] == ["zonemedic: PyTorchJob ml/llm passed unchanged: it runs one pod: "
                                    "nothing to co-locate"]


def test_an_object_opted_out_passes_unchanged(served: Served) -> None:
    _, answer = served.post(review_of(pytorch(labels={"zonemedic.io/admission": "disabled"})))
    assert "patch" not in answer["response"]
    assert "opted out (zonemedic.io/admission=disabled)" in answer["response"]["warnings"][0]
    assert served.counts == {"skipped": 1}


def test_a_kind_it_does_not_place_passes_unchanged(served: Served) -> None:
    review = review_request(o.pod("p"), uid="u", group="", version="v1", kind="Pod",
                            resource="pods", namespace="ml")  # fmt: skip
    _, answer = served.post(review)
    assert answer["response"]["allowed"] is True and "patch" not in answer["response"]
    assert "not a kind zonemedic places" in answer["response"]["warnings"][0]


def test_a_body_that_is_not_a_review_is_400_naming_what_is_wrong(served: Served) -> None:
    status, answer = served.post({"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview"})
    assert status == 400
    assert answer == {"error": "expected apiVersion admission.k8s.io/v1 kind AdmissionReview, got "
                               "apiVersion 'admission.k8s.io/v1beta1' kind 'AdmissionReview'"}
    assert served.counts == {"invalid": 1}
    status, _ = served.post(review_of(pytorch()), path="/elsewhere")
    assert status == 404


def test_warn_mode_answers_warnings_only(tmp_path: Path, store: IncidentStore) -> None:
    settings = Settings(diagnosis=SETTINGS, admission=AdmissionSettings(mode=AdmissionMode.WARN))
    found = serve(tmp_path, store=store, view=make_view(base_items()), settings=settings)
    try:
        _, answer = found.post(review_of(pytorch()))
    finally:
        found.server.stop()
        found.webhook.stop()
    assert "patch" not in answer["response"]
    assert answer["response"]["warnings"][0].startswith("zonemedic (mode warn): would pin")
    (record,) = store.list_admissions(AdmissionQuery(outcome=AdmissionOutcome.WARNED))
    assert (record.mode, record.zone) == ("warn", "a")


def _served_certificate(port: int, ca_file: Path) -> bytes:
    context = ssl.create_default_context(cafile=str(ca_file))
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw, \
            context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return der


def test_a_rotated_certificate_is_served_without_a_restart(served: Served, tmp_path: Path) -> None:
    before = _served_certificate(served.server.port, served.ca_file)
    rotated = make_certificate(["127.0.0.1"], now=datetime.now(UTC))
    staging = write_pair(rotated, tmp_path / "next")
    ca_file = tmp_path / "next-ca.crt"
    ca_file.write_text(rotated.ca_pem)
    # the mounted Secret's files change (as the kubelet swaps them)
    shutil.copyfile(staging[1], served.serving.key_file)
    shutil.copyfile(staging[0], served.serving.cert_file)
    served.serving.watch(0.05)
    after = wait(lambda: _try(served.server.port, ca_file), timeout=10,
                 what="the rotated certificate to be served")  # fmt: skip
    assert after != before
    assert served.serving.loads == 2
    served.serving.stop()


def _try(port: int, ca_file: Path) -> bytes | None:
    try:
        return _served_certificate(port, ca_file)
    except ssl.SSLError:
        return None
