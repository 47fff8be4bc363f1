"""The topology ungater's choice of domain per gated pod: by rank, or greedily."""

from __future__ import annotations

from typing import Any

from agent.twin.kueue import pods_by_rank, pods_greedily
from tests.support import objects

HOST = "kubernetes.io/hostname"
GATE = [{"name": "kueue.x-k8s.io/topology"}]
TOPOLOGY = {"levels": [HOST], "domains": [{"values": ["n1"], "count": 2},
                                          {"values": ["n2"], "count": 2}]}  # fmt: skip


def ranked_pod(name: str, labels: dict[str, str], *, gated: bool = True,
               selector: dict[str, str] | None = None) -> dict[str, Any]:  # fmt: skip
    """A pod held by Kueue's topology gate, or (`gated=False`) one already placed by `selector`."""
    spec: dict[str, Any] = {"schedulingGates": GATE} if gated else {"nodeSelector": selector or {}}
    return objects.pod(name, ns=None, labels=labels, spec=spec, phase=None, kind=False)


def names(chosen: list[tuple[Any, dict[str, str]]] | None) -> list[tuple[str, str]]:
    assert chosen is not None
    return [(p["metadata"]["name"], s[HOST]) for p, s in chosen]


def test_ranks_fill_the_domains_in_order() -> None:
    pods = [ranked_pod(f"w-{i}", {"idx": str(i)}) for i in (3, 0, 2, 1)]
    chosen = pods_by_rank(pods, TOPOLOGY, {"podIndexLabel": "idx"}, offset=0, limit=4, size=4)
    assert names(chosen) == [("w-0", "n1"), ("w-1", "n1"), ("w-2", "n2"), ("w-3", "n2")]


def test_jobs_of_a_pod_set_rank_by_job_index_then_pod_index() -> None:
    request = {"podIndexLabel": "idx", "subGroupIndexLabel": "job", "subGroupCount": 2}
    pods = [ranked_pod(f"j{j}-p{i}", {"idx": str(i), "job": str(j)}) for j in (1, 0) for i in (0, 1)]
    chosen = pods_by_rank(pods, TOPOLOGY, request, offset=0, limit=4, size=4)
    assert names(chosen) == [("j0-p0", "n1"), ("j0-p1", "n1"), ("j1-p0", "n2"), ("j1-p1", "n2")]


def test_unreadable_or_clashing_ranks_give_up_on_ranks() -> None:
    request = {"podIndexLabel": "idx"}
    assert pods_by_rank([ranked_pod("a", {})], TOPOLOGY, request, offset=0, limit=4, size=4) is None
    twins = [ranked_pod("a", {"idx": "1"}), ranked_pod("b", {"idx": "1"})]
    assert pods_by_rank(twins, TOPOLOGY, request, offset=0, limit=4, size=4) is None
    # the larger pod set of a group starts after the leader's ranks: index 0 is below its offset
    assert pods_by_rank([ranked_pod("w-0", {"idx": "0"})], TOPOLOGY, request, offset=1, limit=5,
                        size=4) is None  # fmt: skip
    assert pods_by_rank([ranked_pod("a", {})], TOPOLOGY, {}, offset=0, limit=4, size=4) is None


def test_greedily_the_domains_short_of_ungated_pods_get_the_gated_ones() -> None:
    pods = [ranked_pod("done", {}, gated=False, selector={HOST: "n1"}),
            *(ranked_pod(f"g{i}", {}) for i in range(3))]  # fmt: skip
    assert names(pods_greedily(pods, TOPOLOGY)) == [("g0", "n1"), ("g1", "n2"), ("g2", "n2")]
