"""Alertmanager webhook parsing (lenient v4), dedupe and label -> job mapping (table-driven)."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.model.job import JobRef
from agent.model.workload import JobKind
from agent.sources.alertmanager import (
    Alert,
    AlertStatus,
    AlertTarget,
    Deduper,
    PayloadError,
    fingerprint_of,
    parse_webhook,
    resolve_jobs,
    target_of,
)

V4 = {
    "version": "4",
    "groupKey": '{}:{alertname="TrainingJobGPUUtilizationDrop"}',
    "truncatedAlerts": 0,
    "status": "firing",
    "receiver": "zonemedic",
    "groupLabels": {"alertname": "TrainingJobGPUUtilizationDrop"},
    "commonLabels": {},
    "commonAnnotations": {},
    "externalURL": "http://alertmanager:9093",
    "alerts": [
        {
            "status": "firing",
            "labels": {"alertname": "TrainingJobGPUUtilizationDrop", "namespace": "ml", "created_by_name": "resnet"},
            "annotations": {"summary": "dropped"},
            "startsAt": "2026-11-29T10:00:00Z",
            "endsAt": "0001-01-01T00:00:00Z",
            "generatorURL": "http://prometheus/graph",
            "fingerprint": "abc123",
        },
        {
            "status": "resolved",
            "labels": {"alertname": "CiliumPolicyDrops", "destination_namespace": "nlp", "destination_pod": "bert-worker-0"},
            "startsAt": "2026-11-29T09:00:00Z",
            "fingerprint": "def456",
        },
    ],
}


def test_parses_a_full_v4_payload() -> None:
    hook = parse_webhook(orjson.dumps(V4))
    assert hook.receiver == "zonemedic"
    assert [a.status for a in hook.alerts] == [AlertStatus.FIRING, AlertStatus.RESOLVED]
    first = hook.alerts[0]
    assert first.name == "TrainingJobGPUUtilizationDrop"
    assert first.dedupe_key == ("abc123", "firing", "2026-11-29T10:00:00Z")
    assert first.annotations == {"summary": "dropped"}


@pytest.mark.parametrize(
    ("body", "check"),
    [
        ({"alerts": [{"labels": {"a": "b"}}]}, lambda a: a.status is AlertStatus.FIRING),
        ({"status": "resolved", "alerts": [{"labels": {"a": "b"}}]}, lambda a: a.status is AlertStatus.RESOLVED),
        ({"alerts": [{"labels": {"a": "b"}, "status": "weird"}]}, lambda a: a.status is AlertStatus.FIRING),
        ({"alerts": [{"labels": {"a": "b"}}]}, lambda a: a.fingerprint == fingerprint_of({"a": "b"})),
        ({"alerts": [{"labels": {"n": 3, "x": None}}]}, lambda a: a.labels == {"n": "3", "x": "null"}),
        ({"alerts": [{"labels": {}, "extra": [1, 2]}], "unknown": True}, lambda a: a.labels == {}),
    ],
)
def test_lenient(body: dict[str, object], check: object) -> None:
    (alert,) = parse_webhook(orjson.dumps(body)).alerts
    assert check(alert)  # type: ignore[operator]


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"{not json", "not JSON"),
        (b"[1, 2]", "must be a JSON object"),
        # a label given twice used to be the last one: one body, two meanings, refused
        (b'{"alerts": [{"labels": {"namespace": "ml", "namespace": "prod"}}]}',
         '^body: duplicate key "namespace" in an object$'),
        (b'{"alerts": [{"labels": {"a": "\xc3"}}]}', r"^body: not UTF-8 \(byte 0xc3 at offset 30\)$"),
        (b'{"alerts": [{"labels": {"a": "\\udc00"}}]}', "^body: not JSON: "),
        (b"{}", "alerts: expected a list"),
        (b'{"alerts": {"a": 1}}', "alerts: expected a list"),
        (b'{"alerts": [3]}', r"alerts\[0\]: expected an object"),
        (b'{"alerts": [{"status": "firing"}]}', r"alerts\[0\]\.labels: missing"),
        (b'{"alerts": [{"labels": ["a"]}]}', r"alerts\[0\]\.labels: expected an object"),
        # a label value nested 300 deep used to reach orjson.dumps (limit 254 levels): a 500
        (b'{"alerts": [{"labels": {"a": ' + b"[" * 300 + b"]" * 300 + b"}}]}", r"^alerts\[0\]\.labels\.a: expected a string, got a JSON list"),
        # a key that is not a plain word is named JSON-quoted: the reason stays one line
        (b'{"alerts": [{"labels": {"\\n": []}}]}', r'^alerts\[0\]\.labels\["\\n"\]: expected a string'),
        (b'{"alerts": [{"labels": {"a": "b"}, "annotations": {"s": {"x": {}}}}]}', r"^alerts\[0\]\.annotations\.s: expected a string"),
        # str() of a list nested 1,000 deep raises RecursionError
        (b'{"alerts": [{"labels": {}, "startsAt": ' + b"[" * 1000 + b"]" * 1000 + b"}]}", r"^(alerts\[0\]\.startsAt: expected a string|body: not JSON: nested too deeply)"),
        (b'{"receiver": {"a": 1}, "alerts": []}', r"^receiver: expected a string"),
        (b'{"alerts": [' + b"[" * 2000 + b"]" * 2000 + b"]}", "not JSON"),  # orjson's own depth limit
        (b"{" + b" " * (4 * 1024 * 1024) + b"}", "body too large"),
    ],
)
def test_bad_bodies_give_a_reason(body: bytes, reason: str) -> None:
    with pytest.raises(PayloadError, match=reason):
        parse_webhook(body)


def test_fingerprint_is_order_independent() -> None:
    assert fingerprint_of({"a": "1", "b": "2"}) == fingerprint_of({"b": "2", "a": "1"})
    assert fingerprint_of({"a": "1"}) != fingerprint_of({"a": "2"})


def test_dedupe_by_fingerprint_status_and_start() -> None:
    dedupe = Deduper(capacity=2)
    firing = Alert(AlertStatus.FIRING, {"a": "1"}, starts_at="t1", fingerprint="f")
    assert not dedupe.seen(firing)
    assert not dedupe.seen(firing)  # looking does not remember: only a handled alert is remembered
    dedupe.remember(firing)
    assert dedupe.seen(firing)  # Alertmanager re-sent the group
    resolved = Alert(AlertStatus.RESOLVED, {"a": "1"}, starts_at="t1", fingerprint="f")
    restarted = Alert(AlertStatus.FIRING, {"a": "1"}, starts_at="t2", fingerprint="f")
    assert not dedupe.seen(resolved) and not dedupe.seen(restarted)
    dedupe.remember(resolved)
    dedupe.remember(restarted)
    assert not dedupe.seen(firing)  # evicted (capacity 2): new again
    assert dedupe.seen(resolved) and dedupe.seen(restarted)


def test_dedupe_evicts_the_least_recently_seen() -> None:
    dedupe = Deduper(capacity=2)
    a, b, c = (Alert(AlertStatus.FIRING, {"a": x}, fingerprint=x) for x in "abc")
    dedupe.remember(a)
    dedupe.remember(b)
    assert dedupe.seen(a)  # a is now the most recent
    dedupe.remember(c)
    assert dedupe.seen(a) and dedupe.seen(c) and not dedupe.seen(b)


@pytest.mark.parametrize(
    ("labels", "target"),
    [
        ({"namespace": "ml", "created_by_name": "resnet", "created_by_kind": "PyTorchJob"}, AlertTarget("ml", "resnet", "PyTorchJob")),
        ({"exported_namespace": "ml", "exported_pod": "resnet-worker-0"}, AlertTarget("ml", pod="resnet-worker-0")),
        ({"destination_namespace": "nlp", "destination_pod": "bert-0"}, AlertTarget("nlp", pod="bert-0")),
        ({"namespace": "ml", "label_training_kubeflow_org_job_name": "r"}, AlertTarget("ml", "r")),
        ({"namespace": "ml", "label_jobset_sigs_k8s_io_jobset_name": "llm"}, AlertTarget("ml", "llm")),
        ({"namespace": "ml", "created_by_name": "llm", "created_by_kind": "JobSet"}, AlertTarget("ml", "llm", "JobSet")),
        ({"alertname": "X"}, None),
    ],
)
def test_target_of(labels: dict[str, str], target: AlertTarget | None) -> None:
    assert target_of(Alert(AlertStatus.FIRING, labels)) == target


JOBS = {
    ("ml", "resnet"): [JobRef(JobKind.PYTORCH, "ml", "resnet"), JobRef(JobKind.TF, "ml", "resnet")],
    ("ml", "llm"): [JobRef(JobKind.TRAINJOB, "ml", "llm")],  # the cache names a TrainJob's JobSet so
    ("ml", "ddp"): [JobRef(JobKind.JOBSET, "ml", "ddp")],
}
PODS = {("ml", "resnet-worker-0"): JobRef(JobKind.PYTORCH, "ml", "resnet")}


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        (AlertTarget("ml", "resnet"), [JobRef(JobKind.PYTORCH, "ml", "resnet"), JobRef(JobKind.TF, "ml", "resnet")]),
        (AlertTarget("ml", "resnet", "TFJob"), [JobRef(JobKind.TF, "ml", "resnet")]),
        (AlertTarget("ml", pod="resnet-worker-0"), [JobRef(JobKind.PYTORCH, "ml", "resnet")]),
        (AlertTarget("ml", "gone", pod="resnet-worker-0"), [JobRef(JobKind.PYTORCH, "ml", "resnet")]),
        (AlertTarget("ml", pod="nobody"), []),
        # the rules record a TrainJob's figures under its JobSet's kind and name
        (AlertTarget("ml", "llm", "JobSet"), [JobRef(JobKind.TRAINJOB, "ml", "llm")]),
        (AlertTarget("ml", "llm", "TrainJob"), [JobRef(JobKind.TRAINJOB, "ml", "llm")]),
        (AlertTarget("ml", "ddp", "JobSet"), [JobRef(JobKind.JOBSET, "ml", "ddp")]),
        (AlertTarget("ml", "ddp", "TrainJob"), []),
    ],
)
def test_resolve_jobs(target: AlertTarget, expected: list[JobRef]) -> None:
    found = resolve_jobs(
        target,
        jobs_named=lambda ns, name: JOBS.get((ns, name), []),
        job_of_pod=lambda ns, pod: PODS.get((ns, pod)),
    )
    assert found == expected


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.floats(allow_nan=False)
    | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(
    alerts=st.lists(st.dictionaries(
        st.sampled_from(["labels", "annotations", "status", "startsAt", "endsAt", "fingerprint"]),
        _JSON, max_size=6,
    ), max_size=4),
    top=st.dictionaries(st.sampled_from(["receiver", "status", "groupKey"]), _JSON, max_size=3),
    wrap=st.integers(0, 400),
)
def test_fuzz_any_body_is_a_webhook_or_a_payload_error(
    alerts: list[dict[str, object]], top: dict[str, object], wrap: int
) -> None:
    for alert in alerts[:1]:
        alert.setdefault("labels", {"deep": "@DEEP@"})
    deep = b"[" * wrap + b'"x"' + b"]" * wrap  # a value nested up to 400 deep
    body = orjson.dumps({**top, "alerts": alerts}).replace(b'"@DEEP@"', deep)
    try:
        hook = parse_webhook(body)
    except PayloadError as exc:
        assert "\n" not in str(exc)
        return
    for alert in hook.alerts:
        assert all(isinstance(v, str) for v in alert.labels.values())
        assert isinstance(alert.starts_at, str) and isinstance(alert.fingerprint, str)
