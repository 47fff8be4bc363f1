"""Verdicts, remediation and denied flows of whole clusters, through the real parser and evaluator."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from agent.diagnosis.diagnose import DENIED_FLOWS_CAP, JobScope, diagnose_cluster
from agent.model.finding import Finding
from agent.model.job import JobRef
from agent.model.workload import JobKind
from agent.policy import PolicySet
from agent.settings import DiagnosisSettings, load_diagnosis_settings
from agent.snapshot.collection import Snapshot, parse_snapshot
from tests.support.objects import cnp, job_pod, node, training_job, zone_only
from tests.support.snapshots import load

NODES = [
    node("a1", "zone-a", gpus=8),
    node("a2", "zone-a", gpus=8),
    node("b1", "zone-b", gpus=8),
    node("c1", "zone-c", gpus=0),
]
ZONE_OF = {"a1": "zone-a", "a2": "zone-a", "b1": "zone-b", "c1": "zone-c"}
ZONE_POLICIES = [zone_only("zone-a"), zone_only("zone-b"), zone_only("zone-c")]


def pytorch(
    name: str, master: str | None, *workers: str | None, ns: str = "ml", gpus: int = 1
) -> list[dict[str, Any]]:
    """A PyTorchJob's pods on the given nodes (None: unscheduled), labelled zone=<node zone>."""

    def extra(n: str | None) -> dict[str, str]:
        return {"zone": ZONE_OF[n]} if n else {}

    pods = [
        job_pod(
            "PyTorchJob",
            name,
            "master",
            0,
            node_name=master,
            ns=ns,
            gpus=gpus,
            coordinator=True,
            ports=[("pytorchjob-port", 23456)],
            extra=extra(master),
        )
    ]
    pods += [
        job_pod(
            "PyTorchJob",
            name,
            "worker",
            i,
            node_name=n,
            ns=ns,
            gpus=gpus,
            ports=[("pytorchjob-port", 23456)],
            extra=extra(n),
        )
        for i, n in enumerate(workers)
    ]
    return pods


def run(items: list[dict[str, Any]], **settings: Any) -> list[Finding]:
    snap = load(NODES + items)
    result = diagnose_cluster(
        snap.state, PolicySet(snap.policies), settings=DiagnosisSettings(**settings)
    )
    return list(result.findings)


LOCK_MASTER = cnp(
    "lock-master",
    {
        "endpointSelector": {"matchLabels": {"training.kubeflow.org/replica-type": "master"}},
        "ingress": [{"fromEndpoints": [{"matchLabels": {"app": "nobody"}}]}],
    },
)
DENY_CROSS_ZONE = cnp(
    "deny-cross-zone",
    {
        "endpointSelector": {"matchLabels": {"zone": "zone-b"}},
        "ingressDeny": [
            {
                "fromEndpoints": [
                    {
                        "matchExpressions": [
                            {"key": "zone", "operator": "NotIn", "values": ["zone-b"]}
                        ]
                    }
                ]
            }
        ],
    },
    ns=None,
)


@pytest.mark.parametrize(
    ("items", "settings", "verdict", "remediable", "target", "policies"),
    [
        (pytorch("j", "a1", "a1", "a2"), {}, "healthy", False, None, set()),
        (pytorch("j", "a1", "a1", "a2") + ZONE_POLICIES, {}, "healthy", False, None, set()),
        (
            [*pytorch("j", "a1", "a1"), LOCK_MASTER],
            {},
            "policy_blocked",
            False,
            None,
            {"CiliumNetworkPolicy/ml/lock-master"},
        ),
        (pytorch("j", "b1", "a1", "a2"), {}, "zone_split_degraded", True, "zone-a", set()),
        (
            pytorch("j", "b1", "a1", "a2") + ZONE_POLICIES,
            {},
            "zone_split_blocked",
            True,
            "zone-a",
            {"CiliumNetworkPolicy/ml/zone-a-only", "CiliumNetworkPolicy/ml/zone-b-only"},
        ),
        # explicit mirror key works like auto-detection
        (
            pytorch("j", "b1", "a1", "a2") + ZONE_POLICIES,
            {"pod_zone_label": "zone"},
            "zone_split_blocked",
            True,
            "zone-a",
            {"CiliumNetworkPolicy/ml/zone-a-only", "CiliumNetworkPolicy/ml/zone-b-only"},
        ),
        # mirroring disabled: moving pods does not move their zone label, so nothing fixes it
        (
            pytorch("j", "b1", "a1", "a2") + ZONE_POLICIES,
            {"pod_zone_label": ""},
            "policy_blocked",
            False,
            None,
            {"CiliumNetworkPolicy/ml/zone-a-only", "CiliumNetworkPolicy/ml/zone-b-only"},
        ),
        # split and blocked wherever it goes
        (
            [*pytorch("j", "b1", "a1"), LOCK_MASTER],
            {},
            "policy_blocked",
            False,
            None,
            {"CiliumNetworkPolicy/ml/lock-master"},
        ),
        # a CCNP deny rule against cross-zone ingress into zone-b
        (
            [*pytorch("j", "b1", "a1", "a2"), DENY_CROSS_ZONE],
            {},
            "zone_split_blocked",
            True,
            "zone-a",
            {"CiliumClusterwideNetworkPolicy/deny-cross-zone"},
        ),
        # an unscheduled pod: pending, nothing else said
        (pytorch("j", "b1", "a1", None) + ZONE_POLICIES, {}, "pending", False, None, set()),
        # GPU capacity: 3 x 4 GPUs fit in zone-a (16 free) but not zone-b (8)
        (pytorch("j", "b1", "b1", "a1", gpus=4), {}, "zone_split_degraded", True, "zone-a", set()),
        # protected namespace
        (pytorch("j", "b1", "a1", ns="kube-system"), {}, "zone_split_degraded", False, None, set()),
        (
            pytorch("j", "b1", "a1", ns="ops"),
            {"protected_namespaces": ["ops"]},
            "zone_split_degraded",
            False,
            None,
            set(),
        ),
        # Kueue-managed: label or foreign managedBy
        (
            [
                *pytorch("j", "b1", "a1"),
                training_job("PyTorchJob", "j", labels={"kueue.x-k8s.io/queue-name": "gpu"}),
            ],
            {},
            "zone_split_degraded",
            False,
            None,
            set(),
        ),
        (
            [
                *pytorch("j", "b1", "a1"),
                training_job(
                    "PyTorchJob", "j", run_policy={"managedBy": "kueue.x-k8s.io/multikueue"}
                ),
            ],
            {},
            "zone_split_degraded",
            False,
            None,
            set(),
        ),
        (
            [
                *pytorch("j", "b1", "a1"),
                training_job(
                    "PyTorchJob", "j", run_policy={"managedBy": "kubeflow.org/training-operator"}
                ),
            ],
            {},
            "zone_split_degraded",
            True,
            "zone-a",
            set(),
        ),
        # a finished job object with live pods cannot be resumed
        (
            [*pytorch("j", "b1", "a1"), training_job("PyTorchJob", "j", conditions=["Failed"])],
            {},
            "zone_split_degraded",
            False,
            None,
            set(),
        ),
    ],
)
def test_verdicts(
    items: list[dict[str, Any]],
    settings: dict[str, Any],
    verdict: str,
    remediable: bool,
    target: str | None,
    policies: set[str],
) -> None:
    (finding,) = run(items, **settings)
    assert (finding.verdict, finding.remediable, finding.target_zone) == (
        verdict,
        remediable,
        target,
    )
    assert {p for f in finding.denied_flows for p in f.policies} == policies
    if not remediable and verdict.startswith("zone_split"):
        assert finding.reasons, "a split job that is not remediable says why"


def test_blocked_finding_details() -> None:
    (f,) = run(pytorch("j", "b1", "a1", "a2") + ZONE_POLICIES)
    assert dict(f.zones) == {"zone-a": 2, "zone-b": 1}
    assert f.coordinator is not None and (f.coordinator.pod, f.coordinator.zone) == (
        "j-master-0",
        "zone-b",
    )
    first = f.denied_flows[0].to_dict()
    assert first == {
        "from_pod": "j-worker-0",
        "to_pod": "j-master-0",
        "port": 23456,
        "protocol": "TCP",
        "hop": "ingress",
        "reason": "default_deny",
        "policies": ["CiliumNetworkPolicy/ml/zone-b-only"],
    }
    assert {d.to_dict()["port"] for d in f.denied_flows} == {23456, "1024-65535"}
    # 2 workers -> master on the port, plus master <-> each worker on the range
    assert f.denied_flows_total == 2 + 2 * 2
    assert f.impact is not None and f.impact.gpus_outside_target == 1


def test_deny_rule_reason() -> None:
    (f,) = run([*pytorch("j", "b1", "a1"), DENY_CROSS_ZONE])
    assert {(d.hop, d.reason) for d in f.denied_flows} == {("ingress", "deny_rule")}


def test_denied_flows_are_capped_with_a_total() -> None:
    workers = ["a1" if i % 2 else "a2" for i in range(60)]
    (f,) = run(pytorch("big", "b1", *workers, gpus=0) + ZONE_POLICIES)
    assert f.verdict == "zone_split_blocked"
    assert len(f.denied_flows) == DENIED_FLOWS_CAP
    assert f.denied_flows_total == 60 * 3  # worker->master (port and range), master->worker (range)


def test_no_finding_for_finished_or_podless_jobs() -> None:
    items = pytorch("live", "a1", "a1")
    items += [job_pod("PyTorchJob", "done", "master", 0, node_name="a1", phase="Succeeded")]
    items += [training_job("PyTorchJob", "ghost")]
    assert [f.job.name for f in run(items)] == ["live"]


def test_no_zone_with_capacity() -> None:
    (f,) = run(pytorch("j", "b1", "a1", "a2", "a2", "a2", gpus=5))
    assert (f.verdict, f.remediable, f.target_zone) == ("zone_split_degraded", False, None)
    assert any("free GPUs" in r for r in f.reasons)


def test_not_remediable_still_names_the_zone_that_would_hold_the_job() -> None:
    kueue = training_job("PyTorchJob", "j", labels={"kueue.x-k8s.io/queue-name": "gpu"})
    (f,) = run([*pytorch("j", "b1", "a1", "a2"), *ZONE_POLICIES, kueue])
    assert (f.verdict, f.remediable, f.target_zone) == ("zone_split_blocked", False, None)
    assert f.reasons[0].startswith("Kueue-managed (queue gpu)")
    assert f.reasons[-1] == "zone-a can hold the whole job: co-locate it there by other means"


# -- scoped diagnosis: a scoped finding equals the same job's finding in a whole-cluster run ------

SHARED_SCENARIOS = Path(__file__).resolve().parents[3] / "shared" / "scenarios"
OWN_SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"


def _scenario_cases() -> list[Path]:
    roots = [r for r in (SHARED_SCENARIOS, OWN_SCENARIOS) if r.is_dir()]
    return sorted(p for r in roots for p in r.iterdir() if (p / "snapshot.yaml").is_file())


def _scenario(case: Path) -> tuple[Snapshot, DiagnosisSettings]:
    snap = parse_snapshot([(str(case / "snapshot.yaml"), (case / "snapshot.yaml").read_bytes())])
    config = case / "config.yaml"
    return snap, load_diagnosis_settings(config if config.is_file() else None)


def _check_scopes(snap: Snapshot, settings: DiagnosisSettings, scopes: list[JobScope]) -> int:
    """Every scope's findings are exactly the covered jobs' whole-cluster findings, in order."""
    policies = PolicySet(snap.policies)
    full = diagnose_cluster(snap.state, policies, settings=settings)
    for scope in scopes:
        scoped = diagnose_cluster(snap.state, policies, settings=settings, only=scope)
        assert scoped.findings == tuple(f for f in full.findings if scope.covers(f.job)), scope
        assert scoped.mirror_keys == full.mirror_keys
        # the jobs it diagnosed, by ref: the findings' jobs, as the whole-cluster run found them
        assert list(scoped.jobs) == [f.job for f in scoped.findings]
        assert all(scoped.job(ref) == full.job(ref) for ref in scoped.jobs)
    return len(full.findings)


def _every_single_scope(snap: Snapshot, settings: DiagnosisSettings) -> list[JobScope]:
    full = diagnose_cluster(snap.state, PolicySet(snap.policies), settings=settings).findings
    scopes = [JobScope()]
    scopes += [JobScope(jobs=frozenset({f.job})) for f in full]
    scopes += [JobScope(namespaces=frozenset({f.job.namespace})) for f in full]
    scopes.append(
        JobScope(jobs=frozenset(f.job for f in full[::2]), namespaces=frozenset({"absent"}))
    )
    return scopes


@pytest.mark.parametrize(
    "case", _scenario_cases(), ids=lambda p: f"{p.parent.parent.name}/{p.name}"
)
def test_scoped_findings_equal_whole_cluster_findings_on_scenarios(case: Path) -> None:
    snap, settings = _scenario(case)
    assert _check_scopes(snap, settings, _every_single_scope(snap, settings)) > 0


def test_scenario_cases_are_found() -> None:
    assert len(_scenario_cases()) >= 7  # at least our own cases; the shared ones when present


# `big` (ns ml) is split across zone-a and zone-b; `hog` (ns other) fills zone-a's GPUs, so the
# only zone with room for `big` is zone-b: a scoped run must still count `hog`'s pods.
BIG = pytorch("big", "a1", "b1", gpus=4)
HOG = pytorch("hog", "a1", "a2", "a2", ns="other", gpus=4)
CONTENDED = [
    *NODES,
    *BIG,
    *HOG,
    *pytorch("dev-job", "a1", "b1", ns="dev", gpus=0),
    *pytorch("waiting", "a1", None, ns="dev"),
    *ZONE_POLICIES,
    zone_only("zone-a", ns="dev"),
    zone_only("zone-b", ns="dev"),
]


def test_scoped_capacity_counts_jobs_outside_the_scope() -> None:
    snap = load(CONTENDED)
    settings = DiagnosisSettings()
    scope = JobScope(jobs=frozenset({JobRef(JobKind.PYTORCH, "ml", "big")}))
    (scoped,) = diagnose_cluster(
        snap.state, PolicySet(snap.policies), settings=settings, only=scope
    ).findings
    assert (scoped.verdict, scoped.target_zone) == ("zone_split_blocked", "zone-b")
    alone = load([*NODES, *BIG, *ZONE_POLICIES])  # without `hog`, zone-a would win (more free GPUs)
    (free,) = diagnose_cluster(alone.state, PolicySet(alone.policies), settings=settings).findings
    assert free.target_zone == "zone-a"
    _check_scopes(snap, settings, _every_single_scope(snap, settings))


_CONTENDED_SNAP = load(CONTENDED)
_CONTENDED_REFS = sorted(
    (
        f.job
        for f in diagnose_cluster(
            _CONTENDED_SNAP.state, PolicySet(_CONTENDED_SNAP.policies), settings=DiagnosisSettings()
        ).findings
    ),
    key=str,
)


@given(
    jobs=st.sets(st.sampled_from(_CONTENDED_REFS)),
    namespaces=st.sets(st.sampled_from(["ml", "other", "dev", "absent"])),
)
@hypothesis_settings(max_examples=40, deadline=None)
def test_any_scope_equals_the_whole_cluster_run(jobs: set[JobRef], namespaces: set[str]) -> None:
    scope = JobScope(jobs=frozenset(jobs), namespaces=frozenset(namespaces))
    _check_scopes(_CONTENDED_SNAP, DiagnosisSettings(), [scope])


def _unlabelled(pods: list[dict[str, Any]], *,
               started: frozenset[str] = frozenset()) -> list[dict[str, Any]]:
    """The pods before the zone-mirroring label is written: bound, Pending unless `started`."""
    out = []
    for original in pods:
        pod = {**original, "metadata": {**original["metadata"], "labels": {
            k: v for k, v in original["metadata"]["labels"].items() if k != "zone"}}}
        name = pod["metadata"]["name"]
        pod["status"] = {"phase": "Running" if name in started else "Pending"}
        out.append(pod)
    return out


def test_a_finding_names_the_pods_whose_zone_labels_are_still_to_come() -> None:
    """Bound before the zone label the policies select on is written: the verdict computed then
    is not the one the policies will give (here `zone_split_degraded` for a job whose traffic
    the zone policies deny once labelled), and the finding says which pods it waits for; the key
    is known from the policies alone (no pod of the cluster carries it yet)."""
    job = pytorch("resnet", "b1", "a1", "a2")
    (early,) = run(ZONE_POLICIES + _unlabelled(job))
    assert early.verdict.value == "zone_split_degraded"
    assert early.awaiting_labels == ("resnet-master-0", "resnet-worker-0", "resnet-worker-1")
    (partial,) = run(ZONE_POLICIES + _unlabelled(job[:1]) + job[1:])
    assert partial.awaiting_labels == ("resnet-master-0",)
    (labelled,) = run(ZONE_POLICIES + job)
    assert (labelled.verdict.value, labelled.awaiting_labels) == ("zone_split_blocked", ())
    # started without the label: it will not come (the label is written before the start)
    everyone = frozenset(p["metadata"]["name"] for p in job)
    (started,) = run(ZONE_POLICIES + _unlabelled(job, started=everyone))
    assert started.awaiting_labels == ()
    # no policy reads a zone-valued key: nothing to wait for
    (free,) = run(_unlabelled(job))
    assert free.awaiting_labels == ()
    assert "awaiting_labels" not in free.to_dict()
