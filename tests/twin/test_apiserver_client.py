"""The official `kubernetes` Python client (v37) against the twin's API server over HTTP(S)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import urllib3
from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

from agent.twin.auth import AUTHENTICATED, UserInfo
from agent.twin.faults import RefusalKind
from agent.twin.patch import PatchType
from agent.twin.resources import lookup
from tests.support import objects
from tests.twin.apiserver_harness import Twin, running_twin
from tests.twin.waiting import eventually

PODS = lookup("pods")
JOBS = lookup("jobs", "batch")
GROUP, VERSION, PLURAL = "kubeflow.org", "v1", "pytorchjobs"


@pytest.fixture(scope="module")
def twin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Twin]:
    with running_twin(tmp_path_factory.mktemp("client"), bookmark_interval=0.2) as t:
        yield t


@pytest.fixture(scope="module")
def api(twin: Twin) -> Iterator[client.ApiClient]:
    api_client = config.new_client_from_config(config_file=str(twin.kubeconfig))
    yield api_client
    api_client.close()


@pytest.fixture
def ns(twin: Twin, api: client.ApiClient, request: pytest.FixtureRequest) -> str:
    name = request.node.name.replace("_", "-")[:50].lower().strip("-")
    client.CoreV1Api(api).create_namespace({"metadata": {"name": name}})
    return name


def busybox_pod(name: str, **labels: str) -> dict[str, Any]:
    """A pod of one busybox container, as a client sends it (no namespace, no status)."""
    return objects.pod(name, ns=None, labels=labels, phase=None,
                       containers=[objects.container(name="c", image="busybox")])


def pytorchjob(name: str) -> dict[str, Any]:
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": name},
            "spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 2, "template": {
                "spec": {"containers": [{"name": "pytorch", "image": "i"}],
                         "tolerations": [{"key": "gpu", "operator": "Exists"}]}}}}}}


def test_core_v1_crud(api: client.ApiClient, ns: str) -> None:
    core = client.CoreV1Api(api)
    created = core.create_namespaced_pod(ns, busybox_pod("a", app="x"))
    assert created.metadata.uid and created.status.phase == "Pending"
    assert core.read_namespaced_pod("a", ns).metadata.labels == {"app": "x"}
    listed = core.list_namespaced_pod(ns, label_selector="app=x")
    assert [p.metadata.name for p in listed.items] == ["a"]
    assert int(listed.metadata.resource_version) >= int(created.metadata.resource_version)
    # A dict body goes out as strategic merge: containers merge by name.
    core.patch_namespaced_pod("a", ns, {"spec": {"containers": [{"name": "side", "image": "e"}]}})
    # A list body goes out as JSON patch.
    core.patch_namespaced_pod("a", ns, [{"op": "add", "path": "/metadata/labels/y", "value": "1"}])
    got = core.read_namespaced_pod("a", ns)
    assert [c.name for c in got.spec.containers] == ["c", "side"]
    assert got.metadata.labels == {"app": "x", "y": "1"}
    core.delete_namespaced_pod("a", ns)
    with pytest.raises(ApiException) as err:
        core.read_namespaced_pod("a", ns)
    assert err.value.status == 404
    status = orjson.loads(err.value.body)
    assert status["kind"] == "Status" and status["reason"] == "NotFound"
    assert status["message"] == 'pods "a" not found'


def test_custom_objects_crud_and_patch_content_types(api: client.ApiClient, ns: str) -> None:
    custom = client.CustomObjectsApi(api)
    created = custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, pytorchjob("j"))
    assert created["metadata"]["generation"] == 1
    # v37 sends application/merge-patch+json by default: the tolerations list is replaced whole.
    patched = custom.patch_namespaced_custom_object(
        GROUP, VERSION, ns, PLURAL, "j",
        {"spec": {"pytorchReplicaSpecs": {"Worker": {"template": {"spec": {
            "tolerations": [{"key": "zone", "operator": "Exists"}]}}}}}},
    )
    spec = patched["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    assert spec["tolerations"] == [{"key": "zone", "operator": "Exists"}]
    assert spec["containers"] == [{"name": "pytorch", "image": "i"}]
    assert patched["metadata"]["generation"] == 2
    patched = custom.patch_namespaced_custom_object(
        GROUP, VERSION, ns, PLURAL, "j",
        [{"op": "replace", "path": "/spec/pytorchReplicaSpecs/Worker/replicas", "value": 3}],
        _content_type="application/json-patch+json",
    )
    assert patched["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 3
    with pytest.raises(ApiException) as err:
        custom.patch_namespaced_custom_object(
            GROUP, VERSION, ns, PLURAL, "j", {"spec": {}},
            _content_type="application/strategic-merge-patch+json")
    assert err.value.status == 415
    assert orjson.loads(err.value.body)["reason"] == "UnsupportedMediaType"
    listed = custom.list_namespaced_custom_object(GROUP, VERSION, ns, PLURAL)
    assert [o["metadata"]["name"] for o in listed["items"]] == ["j"]
    assert listed["kind"] == "PyTorchJobList"
    assert custom.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "j")["spec"]
    custom.delete_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "j")
    assert custom.list_namespaced_custom_object(GROUP, VERSION, ns, PLURAL)["items"] == []


def test_optimistic_concurrency_conflict(api: client.ApiClient, ns: str) -> None:
    core = client.CoreV1Api(api)
    first = core.create_namespaced_pod(ns, busybox_pod("a"))
    first.metadata.labels = {"v": "1"}
    core.replace_namespaced_pod("a", ns, first)
    first.metadata.labels = {"v": "2"}
    with pytest.raises(ApiException) as err:
        core.replace_namespaced_pod("a", ns, first)
    assert err.value.status == 409
    assert orjson.loads(err.value.body)["reason"] == "Conflict"
    custom = client.CustomObjectsApi(api)
    job = custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, pytorchjob("j"))
    stale = job["metadata"]["resourceVersion"]
    custom.patch_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "j",
                                          {"metadata": {"labels": {"a": "b"}}})
    with pytest.raises(ApiException) as err:
        custom.patch_namespaced_custom_object(
            GROUP, VERSION, ns, PLURAL, "j",
            {"metadata": {"resourceVersion": stale}, "spec": {"runPolicy": {"suspend": True}}})
    assert err.value.status == 409


def test_dry_run_all_changes_nothing(api: client.ApiClient, ns: str) -> None:
    core = client.CoreV1Api(api)
    preview = core.create_namespaced_pod(ns, busybox_pod("ghost"), dry_run="All")
    assert preview.metadata.name == "ghost"
    assert core.list_namespaced_pod(ns).items == []
    core.create_namespaced_pod(ns, busybox_pod("real"))
    core.patch_namespaced_pod("real", ns, {"metadata": {"labels": {"x": "y"}}}, dry_run="All")
    core.delete_namespaced_pod("real", ns, dry_run="All")
    real = core.read_namespaced_pod("real", ns)
    assert not real.metadata.labels and real.metadata.deletion_timestamp is None
    custom = client.CustomObjectsApi(api)
    custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, pytorchjob("dry"),
                                           dry_run="All")
    assert custom.list_namespaced_custom_object(GROUP, VERSION, ns, PLURAL)["items"] == []


def test_list_pages_with_limit_and_continue(api: client.ApiClient, ns: str) -> None:
    core = client.CoreV1Api(api)
    for i in range(5):
        core.create_namespaced_pod(ns, busybox_pod(f"p{i}"))
    names: list[str] = []
    token = None
    while True:
        page = core.list_namespaced_pod(ns, limit=2, _continue=token)
        names += [p.metadata.name for p in page.items]
        token = page.metadata._continue
        if not token:
            break
    assert names == [f"p{i}" for i in range(5)]


def test_watch_resumes_from_a_resource_version(api: client.ApiClient, ns: str) -> None:
    core = client.CoreV1Api(api)
    core.create_namespaced_pod(ns, busybox_pod("before"))
    rv = core.list_namespaced_pod(ns).metadata.resource_version
    core.create_namespaced_pod(ns, busybox_pod("after"))
    core.patch_namespaced_pod("after", ns, {"metadata": {"labels": {"k": "v"}}})
    core.delete_namespaced_pod("after", ns)
    seen = []
    w = watch.Watch()
    for event in w.stream(core.list_namespaced_pod, ns, resource_version=rv, timeout_seconds=5):
        seen.append((event["type"], event["object"].metadata.name))
        if event["type"] == "DELETED":
            w.stop()
    assert seen == [("ADDED", "after"), ("MODIFIED", "after"), ("DELETED", "after")]


def test_watch_without_version_starts_with_current_state(api: client.ApiClient, ns: str) -> None:
    core = client.CoreV1Api(api)
    core.create_namespaced_pod(ns, busybox_pod("x"))
    w = watch.Watch()
    events = w.stream(core.list_namespaced_pod, ns, timeout_seconds=5)
    first = next(iter(events))
    w.stop()
    events.close()
    assert (first["type"], first["object"].metadata.name) == ("ADDED", "x")


def test_expired_version_gives_410_then_a_relist_recovers(twin: Twin, api: client.ApiClient,
                                                          ns: str) -> None:
    core = client.CoreV1Api(api)
    core.create_namespaced_pod(ns, busybox_pod("a"))
    old = core.list_namespaced_pod(ns).metadata.resource_version
    core.create_namespaced_pod(ns, busybox_pod("b"))
    twin.server.expire_history()
    with pytest.raises(ApiException) as err:
        for _ in watch.Watch().stream(core.list_namespaced_pod, ns, resource_version=old):
            pass
    assert err.value.status == 410
    with pytest.raises(ApiException) as listed:
        core.list_namespaced_pod(ns, resource_version=old, resource_version_match="NotOlderThan")
    assert listed.value.status == 410
    assert orjson.loads(listed.value.body)["reason"] == "Expired"
    fresh = core.list_namespaced_pod(ns)
    assert sorted(p.metadata.name for p in fresh.items) == ["a", "b"]
    core.create_namespaced_pod(ns, busybox_pod("c"))
    w = watch.Watch()
    events = w.stream(core.list_namespaced_pod, ns,
                      resource_version=fresh.metadata.resource_version, timeout_seconds=5)
    first = next(iter(events))
    w.stop()
    events.close()  # releases the streaming response now, not whenever a GC cycle finds it
    assert (first["type"], first["object"].metadata.name) == ("ADDED", "c")


def test_bookmarks_carry_a_resource_version(api: client.ApiClient, ns: str) -> None:
    core = client.CoreV1Api(api)
    rv = core.list_namespaced_pod(ns).metadata.resource_version
    w = watch.Watch()
    for event in w.stream(core.list_namespaced_pod, ns, resource_version=rv,
                          allow_watch_bookmarks=True, timeout_seconds=5):
        assert event["type"] == "BOOKMARK"
        assert int(event["raw_object"]["metadata"]["resourceVersion"]) >= int(rv)
        w.stop()
        break


def test_closed_watch_streams_resume_without_losing_events(twin: Twin, api: client.ApiClient,
                                                           ns: str) -> None:
    core = client.CoreV1Api(api)
    rv = core.list_namespaced_pod(ns).metadata.resource_version
    names: list[str] = []
    w = watch.Watch()

    def consume() -> None:
        for event in w.stream(core.list_namespaced_pod, ns, resource_version=rv):
            names.append(event["object"].metadata.name)
            if len(names) == 6:
                w.stop()

    reader = threading.Thread(target=consume, daemon=True)
    reader.start()
    for i in range(6):
        core.create_namespaced_pod(ns, busybox_pod(f"p{i}"))
        if i in (1, 3):
            # Close the watch once the reader has the event: it must resume after it.
            assert eventually(lambda n=i + 1: len(names) == n)
            assert twin.server.close_watches() >= 1
    reader.join(timeout=20)
    assert names == [f"p{i}" for i in range(6)]


def test_injected_errors_latency_and_accounting(twin: Twin, api: client.ApiClient,
                                                ns: str) -> None:
    core = client.CoreV1Api(api)
    twin.server.accounting.reset()
    twin.server.faults.fail(1, code=500, verb="list", resource="pods")
    with pytest.raises(ApiException) as err:
        core.list_namespaced_pod(ns)
    assert err.value.status == 500
    assert orjson.loads(err.value.body)["reason"] == "InternalError"
    twin.server.faults.fail(1, code=429, retry_after=3)
    http = urllib3.PoolManager()
    raw = http.request("GET", f"{twin.server.url}/api/v1/namespaces/{ns}/pods", retries=False)
    assert raw.status == 429 and raw.headers["Retry-After"] == "3"
    assert orjson.loads(raw.data)["details"]["retryAfterSeconds"] == 3
    core.list_namespaced_pod(ns)  # faults used up
    twin.server.faults.set_latency(0.3)
    started = time.monotonic()
    core.list_namespaced_pod(ns)
    assert time.monotonic() - started >= 0.3
    twin.server.faults.clear()
    stats = orjson.loads(http.request("GET", f"{twin.server.url}/twin/stats").data)
    assert stats["requests"]["list pods"] == 4
    http.clear()


def test_twin_http_fault_endpoints(twin: Twin, api: client.ApiClient, ns: str) -> None:
    http = urllib3.PoolManager()
    base = twin.server.url
    body = orjson.dumps({"count": 2, "code": 500, "resource": "pods"})
    assert http.request("POST", f"{base}/twin/faults/fail", body=body).status == 200
    core = client.CoreV1Api(api)
    for _ in range(2):
        with pytest.raises(ApiException):
            core.list_namespaced_pod(ns)
    core.list_namespaced_pod(ns)
    bad = http.request("POST", f"{base}/twin/faults/fail", body=orjson.dumps({"code": 404}))
    assert bad.status == 400
    old = core.list_namespaced_pod(ns).metadata.resource_version
    core.create_namespaced_pod(ns, busybox_pod("z"))
    assert http.request("POST", f"{base}/twin/faults/expire-history").status == 200
    with pytest.raises(ApiException) as err:
        core.list_namespaced_pod(ns, resource_version=old, resource_version_match="NotOlderThan")
    assert err.value.status == 410
    assert http.request("DELETE", f"{base}/twin/faults").status == 200
    http.clear()


def test_in_process_writes_reach_http_watchers(twin: Twin, api: client.ApiClient,
                                               ns: str) -> None:
    core = client.CoreV1Api(api)
    rv = core.list_namespaced_pod(ns).metadata.resource_version
    twin.store.create(PODS, {"metadata": {"name": "inproc", "namespace": ns},
                             "spec": {"containers": [{"name": "c", "image": "i"}]}})
    twin.store.patch(PODS, "inproc", {"metadata": {"labels": {"a": "b"}}}, namespace=ns,
                     patch_type=PatchType.MERGE)
    w = watch.Watch()
    types = []
    for event in w.stream(core.list_namespaced_pod, ns, resource_version=rv, timeout_seconds=5):
        types.append(event["type"])
        if len(types) == 2:
            w.stop()
    assert types == ["ADDED", "MODIFIED"]


def test_token_auth_over_tls_with_rbac(tmp_path: Path) -> None:
    with running_twin(tmp_path, tokens={"t-bob": UserInfo("bob", (AUTHENTICATED,))}) as t:
        admin = config.new_client_from_config(config_file=str(t.kubeconfig))
        assert t.server.url.startswith("https://")
        client.CoreV1Api(admin).list_namespaced_pod("default")
        conf = client.Configuration()
        conf.host = t.server.url
        assert t.server.ca_pem is not None
        ca = tmp_path / "ca.crt"
        ca.write_bytes(t.server.ca_pem)
        conf.ssl_ca_cert = str(ca)
        conf.api_key = {"authorization": "Bearer t-bob"}
        bob = client.ApiClient(conf)
        with pytest.raises(ApiException) as err:
            client.CoreV1Api(bob).list_namespaced_pod("default")
        assert err.value.status == 403
        assert orjson.loads(err.value.body)["message"] == (
            'pods is forbidden: User "bob" cannot list resource "pods" in API group "" in the '
            'namespace "default"')
        review = client.AuthorizationV1Api(bob).create_self_subject_access_review(
            {"spec": {"resourceAttributes": {"verb": "list", "resource": "pods",
                                             "namespace": "default"}}})
        assert review.status.allowed is False
        admin.close()
        bob.close()


def test_http_create_drops_status_except_for_nodes(api: client.ApiClient, ns: str) -> None:
    core = client.CoreV1Api(api)
    body = busybox_pod("s")
    body["status"] = {"phase": "Running", "podIP": "10.0.0.9"}
    created = core.create_namespaced_pod(ns, body)
    assert created.status.phase == "Pending" and created.status.pod_ip is None
    node = core.create_node({"metadata": {"name": f"node-{ns}"[:60]}, "status": {
        "conditions": [{"type": "Ready", "status": "True"}],
        "nodeInfo": {"kubeletVersion": "v1.32.0", "architecture": "amd64",
                     "bootID": "", "containerRuntimeVersion": "", "kernelVersion": "",
                     "kubeProxyVersion": "", "machineID": "", "operatingSystem": "linux",
                     "osImage": "", "systemUUID": ""}}})
    assert node.status.conditions[0].type == "Ready"
    custom = client.CustomObjectsApi(api)
    job = pytorchjob("st")
    job["status"] = {"conditions": [{"type": "Succeeded"}]}
    assert "status" not in custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, job)


def test_client_retries_429_after_retry_after_but_not_500(twin: Twin, api: client.ApiClient,
                                                          ns: str) -> None:
    # urllib3's default Retry, which the v37 client keeps, honours Retry-After on 429.
    core = client.CoreV1Api(api)
    twin.server.accounting.reset()
    twin.server.faults.fail(1, code=429, retry_after=1, verb="list", resource="pods")
    started = time.monotonic()
    core.list_namespaced_pod(ns)
    assert time.monotonic() - started >= 0.9
    assert twin.server.accounting.snapshot()["list pods"] == 2
    twin.server.faults.fail(1, code=500, verb="list", resource="pods")
    with pytest.raises(ApiException) as err:
        core.list_namespaced_pod(ns)
    assert err.value.status == 500


def job_body(name: str) -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {"template": {"spec": {"restartPolicy": "Never",
                                           "containers": [{"name": "c", "image": "busybox"}]}}}}


def test_admission_refusals_are_403s_worded_as_the_server_words_them(
    twin: Twin, api: client.ApiClient, ns: str
) -> None:
    """A webhook's denial and an exhausted object-count quota, for dry runs only, real writes
    only or both, counted or until cleared; a dry run of a taken name is refused by admission
    before its AlreadyExists."""
    batch = client.BatchV1Api(api)
    faults = twin.server.faults
    faults.refuse(verb="create", resource="jobs", source="policy.example.com",
                  message="jobs need a team label", count=1)  # fmt: skip
    with pytest.raises(ApiException) as err:
        batch.create_namespaced_job(ns, job_body("a"), dry_run="All")
    status = orjson.loads(err.value.body)
    assert (err.value.status, status["reason"]) == (403, "Forbidden")
    assert status["message"] == 'admission webhook "policy.example.com" denied the request: jobs need a team label'
    batch.create_namespaced_job(ns, job_body("a"))  # the count is used up
    # a quota refusing real creates only: the dry run passes (409: the name is taken, so every
    # admission check passed), the create does not
    faults.refuse(verb="create", resource="jobs", kind=RefusalKind.QUOTA, source="job-count",
                  dry_run=False)  # fmt: skip
    with pytest.raises(ApiException) as err:
        batch.create_namespaced_job(ns, job_body("a"), dry_run="All")
    assert err.value.status == 409 and orjson.loads(err.value.body)["reason"] == "AlreadyExists"
    with pytest.raises(ApiException) as err:
        batch.create_namespaced_job(ns, job_body("b"))
    status = orjson.loads(err.value.body)
    assert (err.value.status, status["reason"]) == (403, "Forbidden")
    assert status["message"] == ('jobs.batch "b" is forbidden: exceeded quota: job-count, requested: '
                                 "count/jobs.batch=1, used: count/jobs.batch=1, limited: count/jobs.batch=1")
    assert status["details"] == {"name": "b", "group": "batch", "kind": "jobs"}
    # a webhook on a dry run of a name that is taken: admission answers first
    faults.clear()
    faults.refuse(verb="create", resource="jobs", name="a", message="no")
    with pytest.raises(ApiException) as err:
        batch.create_namespaced_job(ns, job_body("a"), dry_run="All")
    assert err.value.status == 403
    faults.refuse(verb="delete", resource="jobs", message="jobs are kept for audit")
    done = twin.kubectl("delete", "job", "a", "-n", ns, check=False)
    assert done.returncode != 0
    assert 'admission webhook "deny.twin.zonemedic.io" denied the request: jobs are kept for audit' in done.stderr
    faults.clear()
    assert [j.metadata.name for j in batch.list_namespaced_job(ns).items] == ["a"]


def test_a_lost_race_is_a_409_conflict_worded_as_the_server_words_it(
    twin: Twin, api: client.ApiClient, ns: str
) -> None:
    """`kind: conflict`: the write answered as one whose object another writer changed since it
    was read (the optimistic lock), once; the next goes through."""
    batch = client.BatchV1Api(api)
    batch.create_namespaced_job(ns, job_body("a"))
    twin.server.faults.refuse(verb="patch", resource="jobs", kind=RefusalKind.CONFLICT, count=1,
                              dry_run=True)  # fmt: skip
    body = {"metadata": {"labels": {"team": "x"}}}
    with pytest.raises(ApiException) as err:
        batch.patch_namespaced_job("a", ns, body, dry_run="All")
    status = orjson.loads(err.value.body)
    assert (err.value.status, status["reason"]) == (409, "Conflict")
    assert status["message"] == ('Operation cannot be fulfilled on jobs.batch "a": the object has '
                                 "been modified; please apply your changes to the latest version "
                                 "and try again")
    batch.patch_namespaced_job("a", ns, body, dry_run="All")
    assert (batch.read_namespaced_job("a", ns).metadata.labels or {}).get("team") is None


def test_a_write_hook_runs_once_as_the_write_arrives_or_once_it_landed_before_the_answer(
    twin: Twin, api: client.ApiClient, ns: str
) -> None:
    """`on_write(landed=False)` runs before the write is applied (the object is not there yet),
    `landed=True` after it is applied and before the client has its answer; a dry run does not
    use a hook up, and each hook runs once."""
    batch = client.BatchV1Api(api)
    faults = twin.server.faults
    seen: list[tuple[str, str, bool]] = []

    def look(landed: bool) -> Any:
        def callback(record: Any) -> None:
            names = [j["metadata"]["name"] for j in twin.store.list(JOBS, namespace=ns)[0]]
            seen.append((record.verb, record.name, record.name in names))
        return callback

    faults.on_write(look(False), resource="jobs", verb="create", landed=False)
    faults.on_write(look(True), resource="jobs", verb="create", landed=True)
    batch.create_namespaced_job(ns, job_body("a"), dry_run="All")
    assert seen == [] and faults.hooks() == 2
    batch.create_namespaced_job(ns, job_body("a"))
    # a create's name is the body's: known to the hook once the object landed
    assert seen == [("create", "", False), ("create", "a", True)]
    batch.create_namespaced_job(ns, job_body("b"))
    assert len(seen) == 2 and faults.hooks() == 0
    faults.on_write(look(True), resource="jobs")
    faults.refuse(verb="create", resource="jobs")
    faults.fail(1, code=500, verb="list", resource="pods")
    faults.disarm()  # hooks and refusals go, the failure stays
    assert (faults.hooks(), faults.refusals(), faults.pending()) == (0, 0, 1)
    faults.clear()
    with pytest.raises(ValueError, match="not 'get'"):
        faults.on_write(look(True), resource="jobs", verb="get")


def test_twin_http_refusal_endpoint(twin: Twin, api: client.ApiClient, ns: str) -> None:
    http = urllib3.PoolManager()
    base = twin.server.url
    body = orjson.dumps({"verb": "create", "resource": "jobs", "kind": "quota", "dryRun": False, "count": 1})
    answer = http.request("POST", f"{base}/twin/faults/refuse", body=body)
    assert answer.status == 200 and orjson.loads(answer.data) == {"refusals": 1}
    assert orjson.loads(http.request("GET", f"{base}/twin/stats").data)["refusals"] == 1
    with pytest.raises(ApiException) as err:
        client.BatchV1Api(api).create_namespaced_job(ns, job_body("q"))
    assert err.value.status == 403 and "exceeded quota: object-counts" in orjson.loads(err.value.body)["message"]
    for bad, why in [({"resource": "jobs", "kind": "quota", "verb": "delete"}, "creates only"),
                     ({"resource": "jobs", "verb": "get"}, "refusals apply to writes"),
                     ({"verb": "create"}, "missing key 'resource'"),
                     ({"resource": "jobs", "dryRun": "yes"}, "dryRun must be true, false or absent"),
                     ({"resource": "jobs", "kind": "gate"}, "'gate' is not a valid RefusalKind")]:
        answer = http.request("POST", f"{base}/twin/faults/refuse", body=orjson.dumps(bad))
        assert answer.status == 400, bad
        assert why in orjson.loads(answer.data)["message"], (bad, answer.data)
    assert http.request("DELETE", f"{base}/twin/faults").status == 200
    assert orjson.loads(http.request("GET", f"{base}/twin/stats").data)["refusals"] == 0
    http.clear()
