"""The room check (pure), table-driven: required node affinity (every operator, terms ORed,
requirements ANDed, matchFields), pod anti-affinity both ways (live pods and the plan's own pods
packed earlier), required pod affinity, and refusals that say why."""

from __future__ import annotations

import copy
from decimal import Decimal
from typing import Any

import pytest

from agent.remediation.room import PodNeed, check_room, could_hold, node_name
from tests.remediation.builders import node, pod
from tests.support.objects import ZONE

HOST = "kubernetes.io/hostname"
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"


def zone_a() -> list[dict[str, Any]]:
    """a-0: rack r1, 64 cores, an ssd; a-1: rack r2, 16 cores; b-0 in zone-b takes anything."""
    return [
        node("a-0", "zone-a", rack="r1", cores="64", disk="ssd"),
        node("a-1", "zone-a", rack="r2", cores="16"),
        node("b-0", "zone-b", rack="r1", cores="128", disk="ssd"),
    ]


def need(name: str = "p", *, labels: dict[str, str] | None = None, ns: str = "ml",
         selector: dict[str, str] | None = None, affinity: dict[str, Any] | None = None,
         cpu: str = "2") -> PodNeed:  # fmt: skip
    return PodNeed(name=name, requests={"cpu": Decimal(cpu)}, node_selector=selector or {},
                   tolerations=(), namespace=ns, labels=labels or {"app": "train"},
                   affinity=affinity or {})  # fmt: skip


def room(needs: list[PodNeed], *, nodes: list[dict[str, Any]] | None = None,
         bound: list[dict[str, Any]] | None = None,
         replaced: frozenset[tuple[str, str]] = frozenset()) -> str | None:  # fmt: skip
    return check_room(needs, zone="zone-a", zone_label=ZONE, nodes=nodes or zone_a(),
                      bound_pods=bound or [], replaced=replaced)  # fmt: skip


def judged(case: str, needs: list[PodNeed], kw: dict[str, Any], refused: str | None) -> None:
    """The needs fit (`refused` None), or the refusal contains `refused`."""
    reason = room(needs, **kw)
    if refused is None:
        assert reason is None, (case, reason)
    else:
        assert reason is not None and refused in reason, (case, reason)


def fits_on(one: PodNeed) -> set[str]:
    """The zone-a nodes the pod fits on, each tried alone."""
    return {node_name(n) for n in zone_a()[:2] if room([one], nodes=[n]) is None}


# --- required node affinity -----------------------------------------------------------------


def expr(key: str, op: str, *values: str) -> dict[str, Any]:
    return {"key": key, "operator": op, "values": list(values)}


def terms(*terms: dict[str, Any]) -> dict[str, Any]:
    return {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": list(terms)}}}


def term(*exprs: dict[str, Any], fields: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"matchExpressions": list(exprs)}
    if fields is not None:
        out["matchFields"] = fields
    return out


BOTH = {"a-0", "a-1"}


@pytest.mark.parametrize(
    ("case", "affinity", "expected"),
    [
        ("In", terms(term(expr("rack", "In", "r1"))), {"a-0"}),
        ("In, several values", terms(term(expr("rack", "In", "r1", "r2"))), BOTH),
        ("In, label absent", terms(term(expr("pool", "In", "x"))), set()),
        ("NotIn", terms(term(expr("rack", "NotIn", "r1"))), {"a-1"}),
        ("NotIn, label absent", terms(term(expr("pool", "NotIn", "x"))), BOTH),
        ("Exists", terms(term(expr("disk", "Exists"))), {"a-0"}),
        ("DoesNotExist", terms(term(expr("disk", "DoesNotExist"))), {"a-1"}),
        ("Gt", terms(term(expr("cores", "Gt", "32"))), {"a-0"}),
        ("Lt", terms(term(expr("cores", "Lt", "32"))), {"a-1"}),
        ("Gt is strict", terms(term(expr("cores", "Gt", "64"))), set()),
        ("Gt, signed value", terms(term(expr("cores", "Gt", "+15"))), BOTH),
        ("Gt, label not an integer", terms(term(expr("rack", "Gt", "0"))), set()),
        ("Gt, label absent", terms(term(expr("pool", "Gt", "0"))), set()),
        # invalid requirements: the term matches no node
        ("Gt, value not an integer", terms(term(expr("cores", "Gt", "3x"))), set()),
        ("Gt, value with a digit separator", terms(term(expr("cores", "Gt", "1_0"))), set()),
        ("Lt, two values", terms(term(expr("cores", "Lt", "100", "200"))), set()),
        ("In without values", terms(term(expr("rack", "In"))), set()),
        ("NotIn without values", terms(term(expr("rack", "NotIn"))), set()),
        ("Exists with values", terms(term(expr("disk", "Exists", "ssd"))), set()),
        ("unknown operator", terms(term(expr("rack", "Equals", "r1"))), set()),
        # within a term: ANDed; terms: ORed
        ("AND", terms(term(expr("rack", "In", "r1", "r2"), expr("cores", "Lt", "32"))), {"a-1"}),
        ("AND, disjoint", terms(term(expr("rack", "In", "r1"), expr("cores", "Lt", "32"))), set()),
        ("OR", terms(term(expr("rack", "In", "r1")), term(expr("cores", "Lt", "32"))), BOTH),
        ("OR skips an invalid term", terms(term(expr("rack", "In")), term(expr("rack", "In", "r2"))),
         {"a-1"}),
        ("OR skips an empty term", terms({}, term(expr("rack", "In", "r2"))), {"a-1"}),
        ("empty term", terms({}), set()),
        ("empty term list", terms(), set()),
        ("required without terms", {"nodeAffinity": {REQUIRED: {}}}, set()),
        # matchFields: metadata.name, In/NotIn with one value, ANDed with the expressions
        ("matchFields In", terms(term(fields=[expr("metadata.name", "In", "a-1")])), {"a-1"}),
        ("matchFields NotIn", terms(term(fields=[expr("metadata.name", "NotIn", "a-1")])), {"a-0"}),
        ("matchFields AND expressions",
         terms(term(expr("rack", "In", "r2"), fields=[expr("metadata.name", "In", "a-0")])), set()),
        ("matchFields Exists is invalid", terms(term(fields=[expr("metadata.name", "Exists")])), set()),
        ("matchFields two values", terms(term(fields=[expr("metadata.name", "In", "a-0", "a-1")])),
         set()),
        # preferred terms never restrict
        ("preferred only", {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 10, "preference": term(expr("rack", "In", "r9"))}]}}, BOTH),
        ("no affinity", {}, BOTH),
    ],
)  # fmt: skip
def test_required_node_affinity(case: str, affinity: dict[str, Any], expected: set[str]) -> None:
    assert fits_on(need(affinity=affinity)) == expected, case


def test_node_selector_and_node_affinity_both_hold() -> None:
    affinity = terms(term(expr("cores", "Lt", "32")))
    assert fits_on(need(affinity=affinity)) == {"a-1"}
    assert fits_on(need(selector={"rack": "r1"})) == {"a-0"}
    assert fits_on(need(selector={"rack": "r1"}, affinity=affinity)) == set()


def test_node_affinity_refusal_names_the_pod_and_each_node() -> None:
    reason = room([need("train-worker-0", affinity=terms(term(expr("gpu-model", "In", "h100"))))])
    assert reason == (
        "no node in zone zone-a matches the node affinity/selector of pod train-worker-0: "
        "a-0: required node affinity does not match; a-1: required node affinity does not match"
    )
    mixed = room([need("p", selector={"rack": "r2"}, cpu="64")])
    assert mixed is not None and mixed.startswith("zone zone-a has no room for pod p (cpu 64): ")
    assert "a-0: nodeSelector does not match; a-1: not enough cpu" in mixed


# --- pod anti-affinity ----------------------------------------------------------------------


def anti(labels: dict[str, str] | None = None, key: str = HOST, **extra: Any) -> dict[str, Any]:
    one: dict[str, Any] = {"topologyKey": key, **extra}
    if labels is not None:
        one["labelSelector"] = {"matchLabels": labels}
    return {"podAntiAffinity": {REQUIRED: [one]}}


def db(name: str, on: str, *, ns: str = "ml", **kw: Any) -> dict[str, Any]:
    return pod(name, ns=ns, node_name=on, labels={"app": "db"}, **kw)


def with_spec(obj: dict[str, Any], **spec: Any) -> dict[str, Any]:
    obj["spec"].update(spec)
    return obj


ON_BOTH = [db("db-0", "a-0"), db("db-1", "a-1")]
SAME_RACK = [node("a-0", "zone-a", rack="r1"), node("a-1", "zone-a", rack="r1")]


@pytest.mark.parametrize(
    ("case", "needs", "kw", "refused"),
    [
        ("a matching pod on one node: the other node", [need(affinity=anti({"app": "db"}))],
         {"bound": [db("db-0", "a-0")]}, None),
        ("matching pods on every node", [need(affinity=anti({"app": "db"}))], {"bound": ON_BOTH},
         "anti-affinity: no node in zone zone-a may take pod p: a-0: anti-affinity: pod p may not "
         "share kubernetes.io/hostname=a-0 with pod ml/db-0; a-1: anti-affinity: pod p may not "
         "share kubernetes.io/hostname=a-1 with pod ml/db-1"),
        ("matchExpressions In", [need(affinity={"podAntiAffinity": {REQUIRED: [{"topologyKey": HOST,
         "labelSelector": {"matchExpressions": [expr("app", "In", "db", "cache")]}}]}})],
         {"bound": ON_BOTH}, "may not share"),
        ("matchExpressions NotIn", [need(affinity={"podAntiAffinity": {REQUIRED: [{"topologyKey": HOST,
         "labelSelector": {"matchExpressions": [expr("app", "NotIn", "db")]}}]}})],
         {"bound": ON_BOTH}, None),
        ("matchLabels AND matchExpressions", [need(affinity={"podAntiAffinity": {REQUIRED: [{
         "topologyKey": HOST, "labelSelector": {"matchLabels": {"app": "db"},
                                                "matchExpressions": [expr("tier", "Exists")]}}]}})],
         {"bound": ON_BOTH}, None),
        ("no labelSelector selects no pod", [need(affinity=anti(None))], {"bound": ON_BOTH}, None),
        ("an empty labelSelector selects every pod", [need(affinity=anti({}))], {"bound": ON_BOTH},
         "may not share"),
        ("the pod's own namespace by default", [need(affinity=anti({"app": "db"}))],
         {"bound": [db("db-0", "a-0", ns="x"), db("db-1", "a-1", ns="x")]}, None),
        ("listed namespaces", [need(affinity=anti({"app": "db"}, namespaces=["x"]))],
         {"bound": [db("db-0", "a-0", ns="x"), db("db-1", "a-1", ns="x")]}, "with pod x/db-1"),
        ("namespaceSelector {} selects every namespace",
         [need(affinity=anti({"app": "db"}, namespaceSelector={}))],
         {"bound": [db("db-0", "a-0", ns="x"), db("db-1", "a-1", ns="y")]}, "with pod y/db-1"),
        ("a namespaceSelector is taken as every namespace, and said so",
         [need(affinity=anti({"app": "db"}, namespaceSelector={"matchLabels": {"team": "x"}}))],
         {"bound": [db("db-0", "a-0", ns="x"), db("db-1", "a-1", ns="x")]},
         "with pod x/db-1 (its namespaceSelector taken as every namespace)"),
        ("a wider topology domain", [need(affinity=anti({"app": "db"}, key="rack"))],
         {"nodes": SAME_RACK, "bound": [db("db-0", "a-0")]},
         "a-1: anti-affinity: pod p may not share rack=r1 with pod ml/db-0"),
        ("hostname inside that domain", [need(affinity=anti({"app": "db"}))],
         {"nodes": SAME_RACK, "bound": [db("db-0", "a-0")]}, None),
        ("a topologyKey no node has", [need(affinity=anti({"app": "db"}, key="example.com/row"))],
         {"bound": ON_BOTH}, None),
        ("pods the plan replaces do not count", [need(affinity=anti({"app": "db"}))],
         {"bound": ON_BOTH, "replaced": frozenset({("ml", "db-0")})}, None),
        ("finished pods do not count", [need(affinity=anti({"app": "db"}))],
         {"bound": [db("db-0", "a-0", phase="Succeeded"), db("db-1", "a-1")]}, None),
        ("a pod matching its own term: the job's pods one per node (2 nodes, 2 pods)",
         [need(f"w-{i}", affinity=anti({"app": "train"})) for i in range(2)], {}, None),
        ("a pod matching its own term: the third finds no node",
         [need(f"w-{i}", affinity=anti({"app": "train"})) for i in range(3)], {},
         "anti-affinity: no node in zone zone-a may take pod w-2: a-0: anti-affinity: pod w-2 may "
         "not share kubernetes.io/hostname=a-0 with planned pod w-0; a-1: anti-affinity: pod w-2 "
         "may not share kubernetes.io/hostname=a-1 with planned pod w-1"),
        ("matchLabelKeys: another revision does not count",
         [need(labels={"app": "train", "rev": "2"}, affinity=anti({"app": "train"}, matchLabelKeys=["rev"]))],
         {"bound": [pod("old-0", node_name="a-0", labels={"app": "train", "rev": "1"}),
                    pod("old-1", node_name="a-1", labels={"app": "train", "rev": "1"})]}, None),
        ("matchLabelKeys: the same revision does",
         [need(labels={"app": "train", "rev": "2"}, affinity=anti({"app": "train"}, matchLabelKeys=["rev"]))],
         {"bound": [pod("old-0", node_name="a-0", labels={"app": "train", "rev": "2"}),
                    pod("old-1", node_name="a-1", labels={"app": "train", "rev": "2"})]},
         "may not share"),
        # the symmetric rule: a live pod's required anti-affinity keeps matching pods away
        ("an existing pod's term on one node", [need()],
         {"bound": [with_spec(db("guard-0", "a-0"), affinity=anti({"app": "train"}))]}, None),
        ("existing pods' terms on every node", [need()],
         {"bound": [with_spec(db(f"guard-{i}", f"a-{i}"), affinity=anti({"app": "train"}))
                    for i in range(2)]},
         "anti-affinity: no node in zone zone-a may take pod p: a-0: anti-affinity of pod "
         "ml/guard-0 (on a-0) keeps pod p out of kubernetes.io/hostname=a-0; a-1: anti-affinity "
         "of pod ml/guard-1 (on a-1) keeps pod p out of kubernetes.io/hostname=a-1"),
        ("an existing pod's term covers its own namespace only", [need()],
         {"bound": [with_spec(db(f"guard-{i}", f"a-{i}", ns="x"), affinity=anti({"app": "train"}))
                    for i in range(2)]}, None),
        ("an existing pod's term over a wider domain", [need()],
         {"nodes": SAME_RACK,
          "bound": [with_spec(db("guard-0", "a-0"), affinity=anti({"app": "train"}, key="rack"))]},
         "a-1: anti-affinity of pod ml/guard-0 (on a-0) keeps pod p out of rack=r1"),
        ("a planned pod's term keeps a later planned pod away",
         [need("a", labels={"role": "a"}, affinity=anti({"role": "b"})), need("b", labels={"role": "b"})],
         {"nodes": [node("a-0", "zone-a")]},
         "anti-affinity: no node in zone zone-a may take pod b: a-0: anti-affinity of planned pod a "
         "(on a-0) keeps pod b out of kubernetes.io/hostname=a-0"),
    ],
)  # fmt: skip
def test_pod_anti_affinity(case: str, needs: list[PodNeed], kw: dict[str, Any],
                           refused: str | None) -> None:  # fmt: skip
    judged(case, needs, kw, refused)


# --- required pod affinity ------------------------------------------------------------------


def together(labels: dict[str, str], key: str = HOST) -> dict[str, Any]:
    return {"podAffinity": {REQUIRED: [{"topologyKey": key, "labelSelector": {"matchLabels": labels}}]}}


@pytest.mark.parametrize(
    ("case", "needs", "kw", "refused"),
    [
        ("the pod it wants is on a node of the zone", [need(affinity=together({"cache": "warm"}))],
         {"bound": [pod("cache", node_name="a-1", labels={"cache": "warm"})]}, None),
        ("that node is full: no other node will do", [need(affinity=together({"cache": "warm"}), cpu="31")],
         {"bound": [pod("cache", node_name="a-1", labels={"cache": "warm"})]},
         "a-0: pod affinity: no pod its term selects in kubernetes.io/hostname=a-0; "
         "a-1: not enough cpu"),
        ("no such pod and the pod does not match its own term",
         [need(affinity=together({"cache": "warm"}))], {},
         "pod affinity: no node in zone zone-a satisfies the pod affinity of pod p: a-0: pod "
         "affinity: no pod its term selects in kubernetes.io/hostname=a-0"),
        ("the first pod of a group goes anywhere, the rest follow it",
         [need(f"w-{i}", affinity=together({"app": "train"})) for i in range(3)], {}, None),
        ("the rest follow it: one node's room is all they get",
         [need(f"w-{i}", affinity=together({"app": "train"}), cpu="12") for i in range(3)], {},
         "zone zone-a has no room for pod w-2 (cpu 12): a-0: not enough cpu; a-1: pod affinity: "
         "no pod its term selects in kubernetes.io/hostname=a-1"),
        ("a matching pod elsewhere ends the first-pod exception",
         [need(affinity=together({"app": "train"}), cpu="31")],
         {"bound": [pod("train-0", node_name="a-0", labels={"app": "train"})]},
         "a-1: pod affinity: no pod its term selects in kubernetes.io/hostname=a-1"),
        ("the topologyKey must be on the node, first pod or not",
         [need(affinity=together({"app": "train"}, key="example.com/row"))], {},
         "a-0: pod affinity: the node has no example.com/row label"),
        ("the plan's own zone term", [need(f"w-{i}", affinity=together({"app": "train"}, key=ZONE))
                                      for i in range(4)], {}, None),
    ],
)  # fmt: skip
def test_pod_affinity(case: str, needs: list[PodNeed], kw: dict[str, Any],
                      refused: str | None) -> None:  # fmt: skip
    judged(case, needs, kw, refused)


def test_a_long_refusal_quotes_ten_nodes_and_counts_the_rest() -> None:
    nodes = [node(f"a-{i:02}", "zone-a") for i in range(14)]
    reason = room([need(selector={"rack": "r9"})], nodes=nodes)
    assert reason is not None
    assert reason.count("nodeSelector does not match") == 10
    assert reason.endswith("; 4 more nodes refuse it too")


HOLD = [
    ("a CPU node cannot hold a GPU pod", {}, {"cpu": "2", "nvidia.com/gpu": "1"}, False),
    ("a GPU node can", {"gpus": 8}, {"cpu": "2", "nvidia.com/gpu": "1"}, True),
    ("more GPUs than it has", {"gpus": 4}, {"nvidia.com/gpu": "8"}, False),
    ("more cpu than it has", {"cpu": "16"}, {"cpu": "32"}, False),
    ("a request of nothing", {}, {"nvidia.com/gpu": "0"}, True),
    ("a resource it does not declare and that is no extended one", {}, {"ephemeral-storage": "1Gi"},
     True),
    ("cpu and memory a GPU-only view does not declare", {"gpus": 8, "cpu": None},
     {"cpu": "2", "memory": "8Gi", "nvidia.com/gpu": "1"}, True),
    ("an extended resource it does not declare", {}, {"example.com/fpga": "1"}, False),
]  # fmt: skip


@pytest.mark.parametrize(("shape", "requests", "holds"), [c[1:] for c in HOLD], ids=[c[0] for c in HOLD])
def test_a_node_could_hold_a_pod_when_its_allocatable_covers_the_requests(
    shape: dict[str, Any], requests: dict[str, str], holds: bool
) -> None:
    wanted = {k: Decimal(v[:-2]) * 2**30 if v.endswith("Gi") else Decimal(v) for k, v in requests.items()}
    assert could_hold(node("n", "zone-a", **shape), wanted) is holds


# --- what one check shares between the pods of a template -------------------------------------


def test_pods_sharing_an_affinity_object_are_resolved_by_their_own_match_label_keys() -> None:
    """The pods of one template share its affinity object; a term's matchLabelKeys reads each
    pod's own labels: two pods of different groups share a host, two of one group do not."""
    shared = {"podAntiAffinity": {REQUIRED: [{
        "labelSelector": {"matchLabels": {"app": "train"}}, "matchLabelKeys": ["group"],
        "topologyKey": HOST}]}}  # fmt: skip
    one_host = [node("a-0", "zone-a", cores="64")]
    apart = [need("p0", labels={"app": "train", "group": "1"}, affinity=shared),
             need("p1", labels={"app": "train", "group": "2"}, affinity=shared)]  # fmt: skip
    together = [need("p0", labels={"app": "train", "group": "1"}, affinity=shared),
                need("p1", labels={"app": "train", "group": "1"}, affinity=shared)]  # fmt: skip
    assert room(apart, nodes=one_host) is None
    refused = room(together, nodes=one_host)
    assert refused is not None and refused.startswith("anti-affinity: no node in zone zone-a may take pod p1")


def test_a_check_of_shared_placement_objects_is_the_check_of_their_copies() -> None:
    """Needs sharing their nodeSelector, affinity and tolerations objects (as `pod_needs` makes
    a template's) are judged as needs holding copies of them, node by node, refusals included."""
    selector = {"disk": "ssd"}
    affinity = {"podAffinity": {REQUIRED: [{"labelSelector": {"matchLabels": {"app": "train"}},
                                            "topologyKey": "rack"}]}}  # fmt: skip
    for cpu in ("2", "40", "100"):
        shared = [need(f"p{i}", selector=selector, affinity=affinity, cpu=cpu) for i in range(3)]
        copies = [need(f"p{i}", selector=dict(selector), affinity=copy.deepcopy(affinity), cpu=cpu)
                  for i in range(3)]  # fmt: skip
        assert room(shared) == room(copies)
    assert room([need(f"p{i}", selector=selector, affinity=affinity, cpu="40") for i in range(3)]) is not None
