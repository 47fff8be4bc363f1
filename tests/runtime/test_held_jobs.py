"""The jobs the agent's what-if holds per cache generation: after each change to the cache they are
exactly the jobs `find_jobs` finds in the whole state, and only the namespaces that changed are
looked at again."""

from __future__ import annotations

from agent.runtime.held_jobs import HeldJobs
from agent.topology.jobs import find_jobs
from tests.runtime.world import JOB_OBJECT, World, split_pods
from tests.support import objects


def other_pods(count: int) -> list[dict[str, object]]:
    """A PyTorchJob `bert` in namespace `nlp`: a master and `count - 1` workers."""
    return [objects.job_pod("PyTorchJob", "bert", "master" if i == 0 else "worker",
                            max(i - 1, 0), name=f"bert-{'master' if i == 0 else 'worker'}-"
                            f"{max(i - 1, 0)}", ns="nlp", node_name="gpu-a1",
                            coordinator=i == 0) for i in range(count)]  # fmt: skip


BERT = {**JOB_OBJECT, "metadata": {**JOB_OBJECT["metadata"], "name": "bert", "namespace": "nlp",
                                   "uid": "job-uid-2"}}  # fmt: skip


def test_the_held_jobs_follow_the_cache_namespace_by_namespace(world: World) -> None:
    held = HeldJobs(world.parts.settings.diagnosis.groups)
    groups = world.parts.settings.diagnosis.groups

    def check() -> int:
        state, _, facts, _ = world.pipeline.held_view()
        assert list(held.update(state, facts)) == find_jobs(state, groups)
        return held.namespaces_found_last

    assert check() == 1  # the first view: every namespace with pods
    assert check() == 0  # nothing changed
    world.load("pytorchjobs.v1.kubeflow.org", [JOB_OBJECT, BERT])
    world.load("pods", [*split_pods(), *other_pods(3)])
    assert check() == 1  # only nlp changed (its job object and pods)
    world.load("pods", [*split_pods()[:-1], *other_pods(3)])
    assert check() == 1  # a train worker gone
    world.load("pods", [*split_pods()[:-1], *other_pods(2)])
    world.load("pytorchjobs.v1.kubeflow.org", [BERT])
    assert check() == 2  # both changed
    world.load("pods", split_pods()[:-1])
    assert check() == 1  # nlp emptied
    state, _, facts, _ = world.pipeline.held_view()
    assert [str(j.ref) for j in held.update(state, facts)] == ["PyTorchJob/train/gpt-small"]
