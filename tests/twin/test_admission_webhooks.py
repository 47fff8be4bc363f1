"""The twin calls registered mutating webhooks as kube-apiserver does: a real HTTPS webhook
server, driven through the official kubernetes client and kubectl."""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

from agent.twin.cluster import TwinCluster
from agent.twin.resources import lookup
from agent.twin.store import Store
from tests.twin.apiserver_harness import Twin, running_twin
from tests.twin.twin_fixtures import fast
from tests.twin.webhook_server import (
    Certificates,
    WebhookServer,
    allow,
    certificates,
    wait_for,
)

PODS = lookup("pods")
SERVICES = lookup("services")
NAMESPACES = lookup("namespaces")
CONFIGS = lookup("mutatingwebhookconfigurations")
_NAMESPACE_NUMBER = itertools.count()
PIN = {"op": "add", "path": "/metadata/labels/zone-pinned", "value": "us-east-1a"}


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return certificates(tmp_path_factory.mktemp("hook-certs"))


@pytest.fixture(scope="module")
def other_ca(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return certificates(tmp_path_factory.mktemp("other-ca"), name="other")


@pytest.fixture(scope="module")
def hooks(certs: Certificates) -> Iterator[WebhookServer]:
    server = WebhookServer(certs)
    yield server
    server.stop()


def hook_service(port: int) -> dict[str, Any]:
    """The Service the twin resolves `hooks.webhooks.svc:443` through: cluster IP 127.0.0.1,
    port 443 to the webhook server's port."""
    return {"metadata": {"name": "hooks", "namespace": "webhooks"},
            "spec": {"clusterIP": "127.0.0.1",
                     "ports": [{"name": "https", "port": 443, "targetPort": port}]}}


@pytest.fixture(scope="module")
def twin(tmp_path_factory: pytest.TempPathFactory, hooks: WebhookServer) -> Iterator[Twin]:
    with running_twin(tmp_path_factory.mktemp("webhooks")) as t:
        t.store.create(NAMESPACES, {"metadata": {"name": "webhooks"}})
        t.store.create(SERVICES, hook_service(hooks.port))
        yield t


@pytest.fixture(scope="module")
def api(twin: Twin) -> Iterator[client.ApiClient]:
    api_client = config.new_client_from_config(config_file=str(twin.kubeconfig))
    yield api_client
    api_client.close()


@pytest.fixture
def ns(twin: Twin, api: client.ApiClient, request: pytest.FixtureRequest) -> Iterator[str]:
    name = f"t{next(_NAMESPACE_NUMBER)}-" + request.node.originalname.replace("_", "-")[5:40]
    name = name.lower().strip("-")
    client.CoreV1Api(api).create_namespace({"metadata": {"name": name,
                                                         "labels": {"zonemedic": "enabled"}}})
    yield name
    for cfg in twin.store.list(CONFIGS)[0]:
        twin.store.delete(CONFIGS, cfg["metadata"]["name"])


def webhook(name: str, path: str, certs: Certificates, **extra: Any) -> dict[str, Any]:
    hook: dict[str, Any] = {
        "name": name,
        "clientConfig": {"service": {"namespace": "webhooks", "name": "hooks", "path": path},
                         "caBundle": certs.ca_bundle},
        "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                   "resources": ["pods"]}],
        "sideEffects": "None", "admissionReviewVersions": ["v1"],
    }
    hook.update(extra)
    return hook


def register(api: client.ApiClient, name: str, *webhooks: dict[str, Any]) -> None:
    client.AdmissionregistrationV1Api(api).create_mutating_webhook_configuration(
        {"metadata": {"name": name}, "webhooks": list(webhooks)})


def pod(name: str, **labels: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {"app": "train", **labels}},
            "spec": {"containers": [{"name": "main", "image": "busybox"}]}}


def kubectl_create(twin: Twin, tmp_path: Path, obj: dict[str, Any], ns: str) -> Any:
    manifest = tmp_path / f"{obj['metadata']['name']}.json"
    manifest.write_text(json.dumps(obj))
    return twin.kubectl("create", "-n", ns, "-f", str(manifest), check=False)


def error_body(exc: ApiException) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(exc.body)
    return body


def test_patch_applied_and_warnings_returned(twin: Twin, api: client.ApiClient, hooks: WebhookServer,
                                             certs: Certificates, ns: str, tmp_path: Path) -> None:
    hooks.on("/pin", lambda r: allow(r, patch=[PIN], warnings=["pinned to us-east-1a: room"]))
    register(api, "zonemedic", webhook("pin.zonemedic.io", "/pin", certs))
    core = client.CoreV1Api(api)
    created, code, headers = core.create_namespaced_pod_with_http_info(ns, pod("p1"))
    assert code == 201 and headers["Warning"] == '299 - "pinned to us-east-1a: room"'
    assert created.metadata.labels["zone-pinned"] == "us-east-1a"
    assert twin.store.get(PODS, "p1", namespace=ns)["metadata"]["labels"]["zone-pinned"]
    request = hooks.reviews("/pin")[-1]["request"]
    assert hooks.reviews("/pin")[-1]["apiVersion"] == "admission.k8s.io/v1"
    assert request["kind"] == {"group": "", "version": "v1", "kind": "Pod"}
    assert request["resource"] == {"group": "", "version": "v1", "resource": "pods"}
    assert request["requestResource"] == request["resource"]
    assert (request["operation"], request["name"], request["namespace"]) == ("CREATE", "p1", ns)
    assert request["dryRun"] is False and request["oldObject"] is None
    assert request["options"]["kind"] == "CreateOptions"
    assert request["userInfo"]["username"] == "twin-admin"
    assert "uid" not in request["object"]["metadata"]  # admission runs before the server's fields

    done = kubectl_create(twin, tmp_path, pod("p2"), ns)
    assert done.returncode == 0, done.stderr
    assert 'Warning: pinned to us-east-1a: room' in done.stderr
    assert twin.store.get(PODS, "p2", namespace=ns)["metadata"]["labels"]["zone-pinned"]


def test_denied_is_the_webhooks_status(twin: Twin, api: client.ApiClient, hooks: WebhookServer,
                                       certs: Certificates, ns: str, tmp_path: Path) -> None:
    def deny(review: dict[str, Any]) -> dict[str, Any]:
        answer = allow(review, warnings=["no zone has room"])
        answer["response"].update(allowed=False, status={"code": 403, "reason": "Forbidden",
                                                         "message": "no zone has room"})
        return answer

    hooks.on("/deny", deny)
    register(api, "zonemedic", webhook("deny.zonemedic.io", "/deny", certs))
    with pytest.raises(ApiException) as caught:
        client.CoreV1Api(api).create_namespaced_pod(ns, pod("p1"))
    assert caught.value.status == 403
    assert error_body(caught.value)["message"] == (
        'admission webhook "deny.zonemedic.io" denied the request: no zone has room')
    done = kubectl_create(twin, tmp_path, pod("p2"), ns)
    assert done.returncode == 1
    assert "Warning: no zone has room" in done.stderr
    assert ('Error from server (Forbidden): error when creating' in done.stderr
            and 'admission webhook "deny.zonemedic.io" denied the request: no zone has room'
            in done.stderr), done.stderr
    assert twin.store.list(PODS, namespace=ns)[0] == []


def test_a_denial_without_a_code_is_400(api: client.ApiClient, hooks: WebhookServer,
                                        certs: Certificates, ns: str) -> None:
    def deny(review: dict[str, Any]) -> dict[str, Any]:
        answer = allow(review)
        answer["response"]["allowed"] = False
        return answer

    hooks.on("/bare-deny", deny)
    register(api, "zonemedic", webhook("bare.zonemedic.io", "/bare-deny", certs))
    with pytest.raises(ApiException) as caught:
        client.CoreV1Api(api).create_namespaced_pod(ns, pod("p1"))
    assert caught.value.status == 400
    assert error_body(caught.value)["message"] == (
        'admission webhook "bare.zonemedic.io" denied the request without explanation')


def test_timeout_ignore_passes_and_does_not_block_the_twin(
        twin: Twin, api: client.ApiClient, hooks: WebhookServer, certs: Certificates,
        ns: str) -> None:
    hooks.on("/slow", lambda r: allow(r, patch=[PIN]), delay=3)
    register(api, "zonemedic", webhook("slow.zonemedic.io", "/slow", certs, timeoutSeconds=1,
                                       failurePolicy="Ignore"))
    core = client.CoreV1Api(api)
    result: dict[str, Any] = {}

    def create() -> None:
        started = time.monotonic()
        result["pod"] = core.create_namespaced_pod(ns, pod("p1"))
        result["seconds"] = time.monotonic() - started

    worker = threading.Thread(target=create)
    worker.start()
    wait_for(lambda: len(hooks.reviews("/slow")) == 1)
    started = time.monotonic()
    core.list_namespaced_pod(ns)  # other requests are served while the webhook is slow
    assert time.monotonic() - started < 0.5
    worker.join(timeout=10)
    assert 1 <= result["seconds"] < 2.5
    assert "zone-pinned" not in result["pod"].metadata.labels  # failed open, unchanged


def test_timeout_fail_is_an_internal_error(twin: Twin, api: client.ApiClient,
                                           hooks: WebhookServer, certs: Certificates, ns: str,
                                           tmp_path: Path) -> None:
    hooks.on("/slow-fail", allow, delay=3)
    register(api, "zonemedic", webhook("slow.zonemedic.io", "/slow-fail", certs,
                                       timeoutSeconds=1))
    with pytest.raises(ApiException) as caught:
        client.CoreV1Api(api).create_namespaced_pod(ns, pod("p1"))
    assert caught.value.status == 500
    body = error_body(caught.value)
    assert body["reason"] == "InternalError"
    assert body["message"] == (
        'Internal error occurred: failed calling webhook "slow.zonemedic.io": failed to call '
        'webhook: Post "https://hooks.webhooks.svc:443/slow-fail?timeout=1s": context deadline '
        'exceeded')
    done = kubectl_create(twin, tmp_path, pod("p2"), ns)
    assert done.returncode == 1 and "Error from server (InternalError)" in done.stderr
    assert twin.store.list(PODS, namespace=ns)[0] == []


@pytest.mark.parametrize("policy", ["Fail", "Ignore"])
def test_a_certificate_the_ca_bundle_does_not_sign_is_refused(
        twin: Twin, api: client.ApiClient, hooks: WebhookServer, certs: Certificates,
        other_ca: Certificates, ns: str, policy: str) -> None:
    hooks.on("/pin-ca", lambda r: allow(r, patch=[PIN]))
    hook = webhook("pin.zonemedic.io", "/pin-ca", certs, failurePolicy=policy)
    hook["clientConfig"]["caBundle"] = other_ca.ca_bundle
    register(api, "zonemedic", hook)
    core = client.CoreV1Api(api)
    if policy == "Ignore":
        created = core.create_namespaced_pod(ns, pod("p1"))
        assert "zone-pinned" not in created.metadata.labels
        return
    with pytest.raises(ApiException) as caught:
        core.create_namespaced_pod(ns, pod("p1"))
    assert caught.value.status == 500
    assert "x509: certificate signed by unknown authority" in error_body(caught.value)["message"]
    assert hooks.reviews("/pin-ca") == []  # the handshake failed: nothing was sent


def test_selectors_that_do_not_match_leave_the_object_alone(
        twin: Twin, api: client.ApiClient, hooks: WebhookServer, certs: Certificates,
        ns: str) -> None:
    hooks.on("/sel", lambda r: allow(r, patch=[PIN]))
    register(api, "zonemedic", webhook(
        "sel.zonemedic.io", "/sel", certs,
        namespaceSelector={"matchLabels": {"zonemedic": "enabled"}},
        objectSelector={"matchExpressions": [{"key": "zonemedic/opt-out",
                                              "operator": "DoesNotExist"}]}))
    core = client.CoreV1Api(api)
    core.create_namespace({"metadata": {"name": f"{ns}-off"}})
    untouched = core.create_namespaced_pod(f"{ns}-off", pod("p1"))
    opted_out = core.create_namespaced_pod(ns, pod("p2", **{"zonemedic/opt-out": "true"}))
    assert "zone-pinned" not in untouched.metadata.labels
    assert "zone-pinned" not in opted_out.metadata.labels
    assert hooks.reviews("/sel") == []
    pinned = core.create_namespaced_pod(ns, pod("p3"))
    assert pinned.metadata.labels["zone-pinned"] == "us-east-1a"
    assert [r["request"]["name"] for r in hooks.reviews("/sel")] == ["p3"]


def test_rules_that_do_not_match_are_skipped(api: client.ApiClient, hooks: WebhookServer,
                                             certs: Certificates, ns: str) -> None:
    hooks.on("/rules", lambda r: allow(r, patch=[PIN]))
    register(api, "zonemedic", webhook("rules.zonemedic.io", "/rules", certs, rules=[
        {"operations": ["UPDATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["*"]},
        {"operations": ["*"], "apiGroups": ["batch"], "apiVersions": ["*"], "resources": ["*"]},
    ]))
    created = client.CoreV1Api(api).create_namespaced_pod(ns, pod("p1"))
    assert "zone-pinned" not in created.metadata.labels
    assert hooks.reviews("/rules") == []


def test_dry_run_is_flagged_and_stores_nothing(twin: Twin, api: client.ApiClient,
                                               hooks: WebhookServer, certs: Certificates,
                                               ns: str) -> None:
    hooks.on("/dry", lambda r: allow(r, patch=[PIN]))
    register(api, "zonemedic", webhook("dry.zonemedic.io", "/dry", certs,
                                       sideEffects="NoneOnDryRun"))
    created = client.CoreV1Api(api).create_namespaced_pod(ns, pod("p1"), dry_run="All")
    assert created.metadata.labels["zone-pinned"] == "us-east-1a"
    request = hooks.reviews("/dry")[-1]["request"]
    assert request["dryRun"] is True and request["options"]["dryRun"] == ["All"]
    assert twin.store.list(PODS, namespace=ns)[0] == []


def test_v1_refuses_side_effects_some(api: client.ApiClient, certs: Certificates,
                                      ns: str) -> None:
    with pytest.raises(ApiException) as caught:
        register(api, "zonemedic", webhook("some.zonemedic.io", "/x", certs, sideEffects="Some"))
    assert caught.value.status == 422
    assert error_body(caught.value)["message"] == (
        'MutatingWebhookConfiguration.admissionregistration.k8s.io "zonemedic" is invalid: '
        'webhooks[0].sideEffects: Unsupported value: "Some": supported values: "None", '
        '"NoneOnDryRun"')


def test_a_url_client_config_and_a_bad_uid(api: client.ApiClient, hooks: WebhookServer,
                                           certs: Certificates, ns: str) -> None:
    hooks.on("/url", lambda r: allow(r, patch=[PIN]))
    url_hook = webhook("url.zonemedic.io", "", certs)
    url_hook["clientConfig"] = {"url": f"https://127.0.0.1:{hooks.port}/url",
                                "caBundle": certs.ca_bundle}
    register(api, "zonemedic", url_hook)
    core = client.CoreV1Api(api)
    assert core.create_namespaced_pod(ns, pod("p1")).metadata.labels["zone-pinned"]

    def wrong_uid(review: dict[str, Any]) -> dict[str, Any]:
        answer = allow(review)
        answer["response"]["uid"] = "not-the-request"
        return answer

    hooks.on("/url", wrong_uid)
    with pytest.raises(ApiException) as caught:
        core.create_namespaced_pod(ns, pod("p2"))
    uid = hooks.reviews("/url")[-1]["request"]["uid"]
    assert error_body(caught.value)["message"] == (
        'Internal error occurred: failed calling webhook "url.zonemedic.io": received invalid '
        f'webhook response: expected response.uid="{uid}", got "not-the-request"')


@pytest.mark.parametrize(("policy", "calls"), [("IfNeeded", 2), ("Never", 1)])
def test_reinvocation_after_a_later_webhook_changed_the_object(
        api: client.ApiClient, hooks: WebhookServer, certs: Certificates, ns: str,
        policy: str, calls: int) -> None:
    path = f"/first-{policy}"
    hooks.on(path, lambda r: allow(r, patch=[PIN]))
    hooks.on("/second", lambda r: allow(r, patch=[
        {"op": "add", "path": "/metadata/labels/kueue", "value": "suspended"}]))
    register(api, "a-zonemedic", webhook("first.zonemedic.io", path, certs,
                                         reinvocationPolicy=policy))
    register(api, "b-kueue", webhook("second.kueue.io", "/second", certs))
    created = client.CoreV1Api(api).create_namespaced_pod(ns, pod(f"p-{policy.lower()}"))
    assert created.metadata.labels["zone-pinned"] and created.metadata.labels["kueue"]
    seen = hooks.reviews(path)[-calls:]
    assert len([r for r in hooks.reviews(path)
                if r["request"]["name"] == f"p-{policy.lower()}"]) == calls
    if calls == 2:
        assert seen[1]["request"]["object"]["metadata"]["labels"]["kueue"] == "suspended"


def test_kubectl_get_prints_the_upstream_columns(twin: Twin, api: client.ApiClient,
                                                 certs: Certificates, ns: str) -> None:
    register(api, "zonemedic", webhook("a.zonemedic.io", "/a", certs),
             webhook("b.zonemedic.io", "/b", certs))
    out = twin.kubectl("get", "mutatingwebhookconfigurations").stdout.splitlines()
    assert out[0].split() == ["NAME", "WEBHOOKS", "AGE"]
    assert out[1].split()[:2] == ["zonemedic", "2"]
    stored = twin.store.get(CONFIGS, "zonemedic")["webhooks"][0]
    assert (stored["failurePolicy"], stored["matchPolicy"], stored["timeoutSeconds"],
            stored["reinvocationPolicy"], stored["clientConfig"]["service"]["port"]) == (
        "Fail", "Equivalent", 10, "Never", 443)


@pytest.mark.parametrize(("scenario", "label", "count"), [
    ("seed-degraded", "training.kubeflow.org/job-name", 5),  # the training operator's pods
    ("jobset", "jobset.sigs.k8s.io/jobset-name", 4),  # the Job controller's, for JobSet's Jobs
])
def test_pods_the_operators_create_go_through_the_webhook(
        hooks: WebhookServer, certs: Certificates, scenario: str, label: str,
        count: int) -> None:
    path = f"/operator-{scenario}"
    hooks.on(path, lambda r: allow(r, patch=[PIN], warnings=["pinned"]))
    store = Store()
    store.create(NAMESPACES, {"metadata": {"name": "webhooks"}})
    store.create(SERVICES, hook_service(hooks.port))
    store.create(CONFIGS, {"metadata": {"name": "zonemedic"}, "webhooks": [
        webhook("operator.zonemedic.io", path, certs,
                objectSelector={"matchExpressions": [{"key": label, "operator": "Exists"}]})]})
    cluster = TwinCluster(fast(scenario), store=store).start()
    try:
        def pinned() -> bool:
            found = store.list(PODS, namespace="ml", label_selector=label)[0]
            return len(found) == count and all(
                p["metadata"]["labels"].get("zone-pinned") == "us-east-1a" for p in found)

        wait_for(pinned)
        users = {r["request"]["userInfo"]["username"] for r in hooks.reviews(path)}
        assert users == {"system:twin:controller-manager"}
    finally:
        cluster.stop()


def test_configurations_crud_and_watch(twin: Twin, api: client.ApiClient, certs: Certificates,
                                       ns: str, tmp_path: Path) -> None:
    admission = client.AdmissionregistrationV1Api(api)
    manifest = tmp_path / "config.json"
    manifest.write_text(json.dumps({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": "zonemedic"}, "webhooks": [webhook("a.zonemedic.io", "/a", certs)]}))
    twin.kubectl("create", "-f", str(manifest))
    listed = admission.list_mutating_webhook_configuration()
    assert [c.metadata.name for c in listed.items] == ["zonemedic"]
    w = watch.Watch()
    events = w.stream(admission.list_mutating_webhook_configuration, timeout_seconds=5)
    first = next(iter(events))
    w.stop()
    events.close()
    assert (first["type"], first["object"].metadata.name) == ("ADDED", "zonemedic")
    current = admission.read_mutating_webhook_configuration("zonemedic")
    current.webhooks[0].timeout_seconds = 31
    with pytest.raises(ApiException) as caught:
        admission.replace_mutating_webhook_configuration("zonemedic", current)
    assert caught.value.status == 422
    assert "webhooks[0].timeoutSeconds: Invalid value: 31: the timeout value must be between 1 " \
           "and 30 seconds" in error_body(caught.value)["message"]
    admission.delete_mutating_webhook_configuration("zonemedic")
    assert admission.list_mutating_webhook_configuration().items == []


@pytest.mark.parametrize(("service", "reason"), [
    ("missing", 'Post "https://missing.webhooks.svc:443/x": services "missing" not found'),
    ("headless", 'Post "https://headless.webhooks.svc:443/x": cannot route to service with '
                 'ClusterIP "None"'),
    ("remote", 'Post "https://remote.webhooks.svc:443/x": the twin reaches a Service only at a '
               'loopback spec.clusterIP (e.g. 127.0.0.1), not "10.96.0.10"'),
])
def test_a_service_the_twin_cannot_route_to_fails_the_call(
        twin: Twin, api: client.ApiClient, certs: Certificates, ns: str, service: str,
        reason: str) -> None:
    ips = {"headless": "None", "remote": "10.96.0.10"}
    if service in ips and not twin.store.list(SERVICES, namespace="webhooks",
                                              field_selector=f"metadata.name={service}")[0]:
        twin.store.create(SERVICES, {"metadata": {"name": service, "namespace": "webhooks"},
                                     "spec": {"clusterIP": ips[service],
                                              "ports": [{"port": 443}]}})
    hook = webhook("route.zonemedic.io", "/x", certs)
    hook["clientConfig"]["service"]["name"] = service
    register(api, "zonemedic", hook)
    with pytest.raises(ApiException) as caught:
        client.CoreV1Api(api).create_namespaced_pod(ns, pod("p1"))
    assert error_body(caught.value)["message"] == (
        f'Internal error occurred: failed calling webhook "route.zonemedic.io": failed to call '
        f"webhook: {reason}")
