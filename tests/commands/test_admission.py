"""`zonemedic config check` on the `admission:` section, `zonemedic admission manifest`, and
`zonemedic admissions` over a store with recorded decisions."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from agent.cli import main
from agent.model.admission import AdmissionOutcome, AdmissionRecord
from agent.store.repository import IncidentStore

REPO = Path(__file__).resolve().parents[2]


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def config(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "zonemedic.yaml"
    path.write_text(f"playbooks_dir: {REPO / 'playbooks'}\n" + body, encoding="utf-8")
    return path


@pytest.mark.parametrize(("body", "problem"), [
    ("admission: {mode: block}\n", "admission.mode: expected one of warn, enforce, got 'block'"),
    ("admission: {port: 70000}\n", "admission.port: must be at most 65535, got 70000"),
    ("admission: {cert_file: /etc/tls.crt}\n",
     "admission.cert_file, admission.key_file: set both (a mounted certificate and its key) or neither"),
    ("admission: {url: 'http://10.0.0.5:8443/admission/mutate'}\n",
     "admission.url: must start with https://"),
    ("admission: {timeout_seconds: 31}\n", "admission.timeout_seconds: must be at most 30, got 31"),
    ("admission: {enabled: true, port: 8080}\n", "admission.port: must differ from http.port (8080)"),
    ("admission: {namespace_label: 'bad label'}\n", "admission.namespace_label: must be a label key"),
    ("admission: {hots: 0.0.0.0}\n", "admission.hots: unknown key"),
    ("diagnosis: {groups: [{name: Lab_1, selector: {app: lab}, coordinator: {r: c}, workers: {r: w}, "
     "admit_pods: true}]}\n", "diagnosis.groups[Lab_1].name: a group with admit_pods names its own webhook"),
    ("diagnosis: {groups: [{name: lab, selector: {app: lab}, coordinator: {r: c}, workers: {r: w}, "
     "size: 4}]}\n", "diagnosis.groups[lab]: size and gpus are read only for a group placed pod by pod"),
    ("diagnosis: {groups: [{name: lab, selector: {app: lab}, coordinator: {r: c}, workers: {r: w}, "
     "admit_pods: true, size: 0}]}\n", "size: must be at least 1, got 0"),
])
def test_config_check_names_a_bad_admission_key(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, body: str, problem: str,
) -> None:
    code, out, err = cli(capsys, "config", "check", str(config(tmp_path, body)))
    assert (code, out) == (2, "")
    assert problem in err, err
    assert "Traceback" not in err


def test_config_check_accepts_the_admission_section(capsys: pytest.CaptureFixture[str],
                                                     tmp_path: Path) -> None:  # fmt: skip
    body = ("admission: {enabled: true, port: 8443, mode: warn, cert_file: /etc/a/tls.crt, "
            "key_file: /etc/a/tls.key}\n")
    code, out, _ = cli(capsys, "config", "check", str(config(tmp_path, body)))
    assert code == 0 and out.startswith("ok  ")


def test_the_manifest_follows_the_configuration(capsys: pytest.CaptureFixture[str],
                                                tmp_path: Path) -> None:  # fmt: skip
    body = ("admission: {enabled: true, timeout_seconds: 2, cert_file: /c, key_file: /k}\n"
            "diagnosis: {groups: [{name: lab, selector: {app: lab}, coordinator: {role: c}, "
            "workers: {role: w}}]}\n")
    code, out, _ = cli(capsys, "admission", "manifest", "--config", str(config(tmp_path, body)),
                       "--url", "https://10.0.0.5:8443/admission/mutate")  # fmt: skip
    assert code == 0
    manifest = yaml.safe_load(out)
    (hook,) = manifest["webhooks"]
    assert hook["clientConfig"] == {"url": "https://10.0.0.5:8443/admission/mutate"}
    assert hook["timeoutSeconds"] == 2
    resources = {(r["apiGroups"][0], r["resources"][0]) for r in hook["rules"]}
    assert {("kubeflow.org", "pytorchjobs"), ("trainer.kubeflow.org", "trainjobs"),
            ("jobset.x-k8s.io", "jobsets"), ("apps", "deployments"), ("batch", "jobs")} <= resources
    assert all(r["operations"] == ["CREATE"] for r in hook["rules"])
    assert manifest["metadata"]["annotations"] == {
        "cert-manager.io/inject-ca-from": "zonemedic/zonemedic-admission"}
    code, _, err = cli(capsys, "admission", "manifest", "--url", "http://x")
    assert code == 2 and err == "zonemedic: error: --url: must start with https://, got 'http://x'\n"


def test_admissions_lists_the_recorded_decisions(capsys: pytest.CaptureFixture[str],
                                                 store: IncidentStore, db_url: str) -> None:  # fmt: skip
    now = datetime.now(UTC)
    store.record_admission(AdmissionRecord(
        cluster="default", request_uid="u1", decided_at=now, job_kind="PyTorchJob",
        job_namespace="ml", job_name="llm", object_kind="PyTorchJob", object_name="llm",
        outcome=AdmissionOutcome.PLACED, zone="us-east-1a", mode="enforce",
        warning="zonemedic: pinned PyTorchJob ml/llm to zone us-east-1a: ..."))  # fmt: skip
    code, out, _ = cli(capsys, "admissions", "--database", db_url, "--json")
    assert code == 0
    found = json.loads(out)
    assert [a["job"]["name"] for a in found["admissions"]] == ["llm"]
    assert found["week"] == {"placed": 1, "restarts_avoided": 1, "by_outcome": {"placed": 1}}
    code, out, _ = cli(capsys, "admissions", "--database", db_url, "--outcome", "no_zone")
    assert code == 0 and out.splitlines() == [
        "no admission decisions recorded",
        "1 job(s) placed at admission this week, 1 restart(s) avoided"]
    code, _, err = cli(capsys, "admissions", "--database", db_url, "--outcome", "maybe")
    assert code == 2 and "--outcome" in err


def test_a_group_placed_pod_by_pod_adds_its_pods_webhook(capsys: pytest.CaptureFixture[str],
                                                         tmp_path: Path) -> None:  # fmt: skip
    body = ("diagnosis: {groups: [{name: lab, selector: {app: lab}, coordinator: {role: c}, "
            "workers: {role: w}, admit_pods: true, size: 5, gpus: 8}]}\n")
    path = config(tmp_path, body)
    code, out, _ = cli(capsys, "config", "check", str(path))
    assert code == 0 and out.startswith("ok  ")
    code, out, _ = cli(capsys, "admission", "manifest", "--config", str(path))
    assert code == 0
    main_hook, pods = yaml.safe_load(out)["webhooks"]
    assert all(r["resources"] != ["pods"] for r in main_hook["rules"])
    assert (pods["name"], pods["rules"][0]["resources"]) == ("lab.pods.placement.zonemedic.io", ["pods"])
    assert pods["objectSelector"]["matchLabels"] == {"app": "lab"}
