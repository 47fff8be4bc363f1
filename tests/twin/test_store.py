"""The twin's object store: verbs, versions, GC, graceful deletion, admission, in-process watch."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from agent.twin.apierror import ApiError
from agent.twin.deletion import Propagation
from agent.twin.patch import PatchType
from agent.twin.resources import lookup
from agent.twin.store import Store
from agent.twin.watch import WatchEvent
from tests.support import objects
from tests.twin.waiting import eventually

PODS = lookup("pods")
PYTORCH = lookup("pytorchjobs")
JOBS = lookup("jobs", "batch")
NAMESPACES = lookup("namespaces")


class FakeClock:
    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def store(clock: FakeClock) -> Any:
    s = Store(clock=clock)
    yield s
    s.close()


def default_pod(name: str, *, node: str | None = "n1", labels: dict[str, str] | None = None,
                owner: dict[str, Any] | None = None, grace: int | None = None) -> dict[str, Any]:
    """A pod in `default` as a client creates it (no status)."""
    return objects.pod(name, ns="default", node_name=node, labels=labels, phase=None,
                       owner_refs=[owner] if owner else None,
                       spec={} if grace is None else {"terminationGracePeriodSeconds": grace})


def default_job() -> dict[str, Any]:
    """The PyTorchJob `j` in `default` as a client creates it (two workers, no status)."""
    return objects.training_job("PyTorchJob", "j", ns="default", status=False,
                                replicas={"Worker": {"replicas": 2}})


def owner_ref(obj: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": obj["apiVersion"], "kind": obj["kind"],
            "name": obj["metadata"]["name"], "uid": obj["metadata"]["uid"], "controller": True}


def names(store: Store, rt: Any = PODS) -> list[str]:
    return [o["metadata"]["name"] for o in store.list(rt)[0]]


def test_fresh_store_holds_the_four_system_namespaces(store: Store) -> None:
    assert names(store, NAMESPACES) == ["default", "kube-node-lease", "kube-public", "kube-system"]
    ns = store.get(NAMESPACES, "kube-system")
    assert ns["metadata"]["labels"] == {"kubernetes.io/metadata.name": "kube-system"}


def test_create_fills_server_fields_and_generate_name(store: Store) -> None:
    created = store.create(PODS, {"metadata": {"generateName": "w-"}, "spec": {}})
    meta = created["metadata"]
    assert meta["name"].startswith("w-") and len(meta["name"]) == 7
    assert meta["uid"] and meta["creationTimestamp"] == "2023-11-14T22:13:20Z"
    assert meta["generation"] == 1 and int(meta["resourceVersion"]) > 4
    assert created["kind"] == "Pod" and created["apiVersion"] == "v1"
    assert created["status"]["phase"] == "Pending"


@pytest.mark.parametrize(
    ("body", "code", "reason"),
    [
        ({"metadata": {}}, 422, "Invalid"),
        ({"metadata": {"name": "Bad_Name"}}, 422, "Invalid"),
        ({"metadata": {"name": "x", "namespace": "nope"}}, 404, "NotFound"),
        ({"kind": "Service", "metadata": {"name": "x"}}, 400, "BadRequest"),
        ({"metadata": "not a map"}, 400, "BadRequest"),
    ],
)
def test_create_refuses_bad_objects(store: Store, body: dict[str, Any], code: int,
                                    reason: str) -> None:
    with pytest.raises(ApiError) as err:
        store.create(PODS, body)
    assert (err.value.code, err.value.reason) == (code, reason)
    assert err.value.status()["kind"] == "Status"
    assert names(store) == []


def test_create_twice_is_already_exists(store: Store) -> None:
    store.create(PODS, default_pod("a"))
    with pytest.raises(ApiError) as err:
        store.create(PODS, default_pod("a"))
    assert err.value.code == 409 and err.value.reason == "AlreadyExists"
    assert err.value.message == 'pods "a" already exists'


def test_update_with_stale_version_conflicts(store: Store) -> None:
    first = store.create(PODS, default_pod("a"))
    first["metadata"]["labels"] = {"x": "1"}
    second = store.update(PODS, first)
    assert second["metadata"]["labels"] == {"x": "1"}
    first["metadata"]["labels"] = {"x": "2"}
    with pytest.raises(ApiError) as err:
        store.update(PODS, first)
    assert err.value.code == 409 and err.value.reason == "Conflict"
    assert "the object has been modified" in err.value.message


def test_custom_resource_update_needs_a_resource_version(store: Store) -> None:
    created = store.create(PYTORCH, default_job())
    del created["metadata"]["resourceVersion"]
    with pytest.raises(ApiError) as err:
        store.update(PYTORCH, created)
    assert err.value.code == 422


def test_generation_moves_with_spec_not_metadata_or_status(store: Store) -> None:
    store.create(PYTORCH, default_job())
    labelled = store.patch(PYTORCH, "j", {"metadata": {"labels": {"a": "b"}}},
                           namespace="default", patch_type=PatchType.MERGE)
    assert labelled["metadata"]["generation"] == 1
    status = store.patch(PYTORCH, "j", {"status": {"conditions": [{"type": "Running"}]}},
                         namespace="default", patch_type=PatchType.MERGE, subresource="status")
    assert status["metadata"]["generation"] == 1 and status["status"]["conditions"]
    spec = store.patch(PYTORCH, "j", {"spec": {"runPolicy": {"suspend": True}}},
                       namespace="default", patch_type=PatchType.MERGE)
    assert spec["metadata"]["generation"] == 2
    assert spec["status"]["conditions"] == [{"type": "Running"}]  # main resource keeps status


def test_main_resource_write_ignores_status_and_status_write_ignores_spec(store: Store) -> None:
    store.create(PYTORCH, default_job())
    out = store.patch(PYTORCH, "j", {"status": {"x": 1}}, namespace="default",
                      patch_type=PatchType.MERGE)
    assert "status" not in out
    out = store.patch(PYTORCH, "j", {"spec": {"y": 1}, "status": {"x": 1}},
                      namespace="default", patch_type=PatchType.MERGE, subresource="status")
    assert out["status"] == {"x": 1} and "y" not in out["spec"]


@pytest.mark.parametrize(
    ("patch_type", "body", "expect"),
    [
        (PatchType.MERGE, {"spec": {"runPolicy": {"suspend": True}}}, True),
        (PatchType.JSON, [{"op": "add", "path": "/spec/runPolicy", "value": {"suspend": True}}],
         True),
    ],
)
def test_custom_resources_take_merge_and_json_patch(store: Store, patch_type: PatchType,
                                                    body: Any, expect: bool) -> None:
    store.create(PYTORCH, default_job())
    out = store.patch(PYTORCH, "j", body, namespace="default", patch_type=patch_type)
    assert out["spec"]["runPolicy"]["suspend"] is expect


def test_strategic_merge_on_custom_resource_is_415(store: Store) -> None:
    store.create(PYTORCH, default_job())
    with pytest.raises(ApiError) as err:
        store.patch(PYTORCH, "j", {"spec": {}}, namespace="default",
                    patch_type=PatchType.STRATEGIC)
    assert err.value.code == 415 and err.value.reason == "UnsupportedMediaType"


def test_patch_with_stale_resource_version_conflicts(store: Store) -> None:
    store.create(PYTORCH, default_job())
    with pytest.raises(ApiError) as err:
        store.patch(PYTORCH, "j", {"metadata": {"resourceVersion": "1"}, "spec": {"a": 1}},
                    namespace="default", patch_type=PatchType.MERGE)
    assert err.value.code == 409


def test_failed_json_patch_test_is_422_and_changes_nothing(store: Store) -> None:
    before = store.create(PYTORCH, default_job())
    with pytest.raises(ApiError) as err:
        store.patch(PYTORCH, "j", [{"op": "test", "path": "/spec/x", "value": 1}],
                    namespace="default", patch_type=PatchType.JSON)
    assert err.value.code == 422
    assert store.get(PYTORCH, "j", namespace="default") == before


def test_no_op_write_keeps_the_resource_version(store: Store) -> None:
    before = store.create(PODS, default_pod("a", labels={"k": "v"}))
    after = store.patch(PODS, "a", {"metadata": {"labels": {"k": "v"}}}, namespace="default",
                        patch_type=PatchType.STRATEGIC)
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]


def test_dry_run_stores_nothing_and_notifies_nobody(store: Store) -> None:
    seen: list[WatchEvent] = []
    stop = store.subscribe(PODS, seen.append)
    rv = store.resource_version
    store.create(PODS, default_pod("a"), dry_run=True)
    assert names(store) == []
    store.create(PODS, default_pod("b"))
    store.patch(PODS, "b", {"metadata": {"labels": {"x": "y"}}}, namespace="default",
                patch_type=PatchType.MERGE, dry_run=True)
    store.delete(PODS, "b", namespace="default", dry_run=True)
    assert store.get(PODS, "b", namespace="default")["metadata"]["labels"] == {}
    assert int(store.resource_version) == int(rv) + 1
    # Events arrive in order: once the marker's is delivered, every earlier one was.
    store.create(PODS, default_pod("marker"))
    assert eventually(lambda: len(seen) >= 2 and seen[-1].object["metadata"]["name"] == "marker")
    stop()
    assert [(e.type, e.object["metadata"]["name"]) for e in seen] == [
        ("ADDED", "b"), ("ADDED", "marker")]


def test_admission_hook_refuses_a_write(store: Store) -> None:
    def immutable_template(old: dict[str, Any] | None, new: dict[str, Any]) -> None:
        if old is not None and old["spec"].get("template") != new["spec"].get("template"):
            raise ApiError(422, "Invalid", "spec.template: field is immutable")

    store.add_admission(JOBS, immutable_template)
    store.create(JOBS, {"metadata": {"name": "b"}, "spec": {"template": {"a": 1}}})
    with pytest.raises(ApiError) as err:
        store.patch(JOBS, "b", {"spec": {"template": {"a": 2}}}, namespace="default",
                    patch_type=PatchType.MERGE)
    assert err.value.code == 422
    store.patch(JOBS, "b", {"spec": {"suspend": True}}, namespace="default",
                patch_type=PatchType.MERGE)


def test_bind_sets_node_once(store: Store) -> None:
    store.create(PODS, default_pod("a", node=None))
    store.bind("default", "a", "n7")
    bound = store.get(PODS, "a", namespace="default")
    assert bound["spec"]["nodeName"] == "n7"
    assert bound["status"]["conditions"][0]["type"] == "PodScheduled"
    with pytest.raises(ApiError) as err:
        store.bind("default", "a", "n8")
    assert err.value.code == 409


def test_list_selectors_limit_and_continue(store: Store) -> None:
    for i in range(5):
        store.create(PODS, default_pod(f"p{i}", labels={"k": "a" if i % 2 else "b"},
                               node=None if i == 4 else "n1"))
    objs, _ = store.list(PODS, label_selector="k in (a)")
    assert [o["metadata"]["name"] for o in objs] == ["p1", "p3"]
    objs, _ = store.list(PODS, field_selector="spec.nodeName=")
    assert [o["metadata"]["name"] for o in objs] == ["p4"]
    page, _, token = store.list_refs(PODS, limit=2)
    assert [o["metadata"]["name"] for o in page] == ["p0", "p1"] and token
    page, _, token = store.list_refs(PODS, limit=2, continue_token=token)
    assert [o["metadata"]["name"] for o in page] == ["p2", "p3"]
    page, _, token = store.list_refs(PODS, limit=2, continue_token=token)
    assert [o["metadata"]["name"] for o in page] == ["p4"] and token is None
    with pytest.raises(ApiError) as err:
        store.list(PODS, field_selector="spec.bogus=x")
    assert err.value.code == 400


def test_background_delete_collects_dependents(store: Store) -> None:
    owner = store.create(PYTORCH, default_job())
    for i in range(2):
        store.create(PODS, default_pod(f"j-worker-{i}", node=None, owner=owner_ref(owner)))
    store.create(PODS, default_pod("other", node=None))
    store.delete(PYTORCH, "j", namespace="default")
    assert names(store) == ["other"]


def test_orphan_delete_keeps_dependents_without_the_reference(store: Store) -> None:
    owner = store.create(PYTORCH, default_job())
    store.create(PODS, default_pod("w", node=None, owner=owner_ref(owner)))
    store.delete(PYTORCH, "j", namespace="default", propagation=Propagation.ORPHAN)
    assert names(store, PYTORCH) == []
    assert "ownerReferences" not in store.get(PODS, "w", namespace="default")["metadata"]


def test_foreground_delete_waits_for_terminating_dependents(store: Store,
                                                             clock: FakeClock) -> None:
    owner = store.create(PYTORCH, default_job())
    store.create(PODS, default_pod("w", node="n1", grace=10, owner=owner_ref(owner)))
    pending = store.delete(PYTORCH, "j", namespace="default", propagation=Propagation.FOREGROUND)
    assert pending["metadata"]["finalizers"] == ["foregroundDeletion"]
    assert store.get(PODS, "w", namespace="default")["metadata"]["deletionTimestamp"]
    assert names(store, PYTORCH) == ["j"]
    clock.now += 11
    # The store's own grace timer may expire the pod before this call does (it reads the same
    # fake clock): either way the dependent and then the owner are gone once the grace is over.
    assert store.expire_due() in (0, 1)
    assert names(store) == [] and names(store, PYTORCH) == []


def test_graceful_pod_deletion_and_shortening(store: Store, clock: FakeClock) -> None:
    store.create(PODS, default_pod("a", grace=30))
    store.create(PODS, default_pod("unscheduled", node=None, grace=30))
    marked = store.delete(PODS, "a", namespace="default")
    assert marked["metadata"]["deletionTimestamp"] == "2023-11-14T22:13:50Z"
    assert marked["metadata"]["deletionGracePeriodSeconds"] == 30
    store.delete(PODS, "unscheduled", namespace="default")  # never scheduled: gone at once
    assert names(store) == ["a"]
    clock.now += 5
    assert store.expire_due() == 0
    store.delete(PODS, "a", namespace="default", grace_period_seconds=0)
    assert names(store) == []


def test_graceful_deletion_timer_runs_on_real_time() -> None:
    store = Store()
    try:
        store.create(PODS, default_pod("a", grace=1))
        store.delete(PODS, "a", namespace="default")
        assert eventually(lambda: names(store) == [], timeout=5)
    finally:
        store.close()


def test_finalizers_hold_an_object_until_removed(store: Store) -> None:
    store.create(PYTORCH, {**default_job(), "metadata": {"name": "j", "finalizers": ["x/y"]}})
    store.delete(PYTORCH, "j", namespace="default")
    assert store.get(PYTORCH, "j", namespace="default")["metadata"]["deletionTimestamp"]
    store.patch(PYTORCH, "j", {"metadata": {"finalizers": None}}, namespace="default",
                patch_type=PatchType.MERGE)
    assert names(store, PYTORCH) == []


def test_namespace_deletion_removes_its_contents(store: Store) -> None:
    store.create(NAMESPACES, {"metadata": {"name": "team"}})
    store.create(PODS, {**default_pod("a", node=None), "metadata": {"name": "a", "namespace": "team"}})
    store.delete(NAMESPACES, "team")
    assert names(store) == []
    assert "team" not in names(store, NAMESPACES)


def test_subscribe_delivers_in_order_off_the_lock(store: Store) -> None:
    seen: list[tuple[str, str]] = []
    patched = threading.Event()
    done = threading.Event()

    def record(event: WatchEvent) -> None:
        # Writing from a callback must not deadlock: callbacks run off the store lock.
        if event.type == "ADDED" and event.object["metadata"]["name"] == "a":
            store.patch(PODS, "a", {"metadata": {"labels": {"seen": "1"}}},
                        namespace="default", patch_type=PatchType.MERGE)
        seen.append((event.type, event.object["metadata"]["name"]))
        if event.type == "MODIFIED":
            patched.set()
        if event.type == "DELETED":
            done.set()

    stop = store.subscribe(PODS, record)
    store.create(PODS, default_pod("a", node=None))
    assert patched.wait(5)  # the callback's own write came back before the delete
    store.delete(PODS, "a", namespace="default")
    assert done.wait(5)
    stop()
    assert seen == [("ADDED", "a"), ("MODIFIED", "a"), ("DELETED", "a")]


def test_subscribe_since_replays_history_and_410_after_compaction(store: Store) -> None:
    store.create(PODS, default_pod("a", node=None))
    rv = store.resource_version
    store.create(PODS, default_pod("b", node=None))
    seen: list[str] = []
    got = threading.Event()

    def record(event: WatchEvent) -> None:
        seen.append(event.object["metadata"]["name"])
        got.set()

    stop = store.subscribe(PODS, record, since=rv)
    assert got.wait(5)
    stop()
    assert seen == ["b"]
    store.compact()
    with pytest.raises(ApiError) as err:
        store.subscribe(PODS, record, since=rv)
    assert err.value.code == 410 and err.value.reason == "Expired"


def test_history_limit_expires_old_versions() -> None:
    store = Store(history_limit=3)
    try:
        start = store.resource_version
        for i in range(5):
            store.create(PODS, default_pod(f"p{i}", node=None))
        with pytest.raises(ApiError) as err:
            store.list_refs(PODS, resource_version=start)
        assert err.value.code == 410
        store.list_refs(PODS, resource_version=store.resource_version)
    finally:
        store.close()


def test_returned_objects_are_copies(store: Store) -> None:
    created = store.create(PODS, default_pod("a"))
    created["metadata"]["labels"]["mutated"] = "yes"
    listed = store.list(PODS)[0][0]
    listed["spec"]["nodeName"] = "elsewhere"
    fresh = store.get(PODS, "a", namespace="default")
    assert fresh["metadata"]["labels"] == {} and fresh["spec"]["nodeName"] == "n1"


def test_selector_watch_turns_label_changes_into_added_and_deleted(store: Store) -> None:
    stream = store.open_watch(PODS, namespace="default", since=store.resource_version,
                              label_selector="app=web")
    store.create(PODS, default_pod("a", node=None, labels={"app": "web"}))
    store.create(PODS, default_pod("b", node=None, labels={"app": "db"}))
    for labels in ({"app": "db"}, {"app": "web"}, {"app": "web", "x": "1"}):
        store.patch(PODS, "a", {"metadata": {"labels": labels}}, namespace="default",
                    patch_type=PatchType.MERGE)
    store.delete(PODS, "a", namespace="default")
    seen = []
    while (event := stream.next(0.2)) is not None:
        seen.append((event.type, event.object["metadata"]["name"]))
    stream.close()
    assert seen == [("ADDED", "a"), ("DELETED", "a"), ("ADDED", "a"), ("MODIFIED", "a"),
                    ("DELETED", "a")]
    assert stream.bookmark_rv() == int(store.resource_version)


def test_dry_run_delete_answers_as_the_delete_would(store: Store) -> None:
    owner = store.create(PYTORCH, default_job())
    store.create(PODS, default_pod("bound", grace=20, owner=owner_ref(owner)))
    store.create(PODS, default_pod("free", node=None))
    rv = store.resource_version
    marked = store.delete(PODS, "bound", namespace="default", dry_run=True)
    assert marked["metadata"]["deletionGracePeriodSeconds"] == 20
    assert marked["metadata"]["deletionTimestamp"] == "2023-11-14T22:13:40Z"
    held = store.delete(PYTORCH, "j", namespace="default", dry_run=True,
                        propagation=Propagation.FOREGROUND)
    assert held["metadata"]["finalizers"] == ["foregroundDeletion"]
    gone = store.delete(PODS, "free", namespace="default", dry_run=True)
    assert "deletionTimestamp" not in gone["metadata"]  # removed at once: its last state
    assert store.resource_version == rv
    assert names(store) == ["bound", "free"] and names(store, PYTORCH) == ["j"]
    assert not store.get(PODS, "bound", namespace="default")["metadata"].get("deletionTimestamp")
    assert store.delete_collection(PODS, namespace="default", dry_run=True)[0]["metadata"][
        "deletionGracePeriodSeconds"] == 20
    assert store.resource_version == rv
