"""The what-if's background warm-up over the real pipeline's view of its cache: it finds the jobs
of each cache generation ahead of the requests (nothing before the caches are synced), a request
after it finds nothing again, and the warmed answer is the one computed cold, from scratch."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import timedelta

import orjson
import pytest

from agent.diagnosis.whatif import Cluster, blast_radius
from agent.runtime.whatif import LiveWhatIf, changed_cluster, parse_change
from agent.runtime.whatif_warmer import WhatIfWarmer
from tests.runtime.world import World, gpt_pod

DELETE = orjson.dumps({"delete": "CiliumNetworkPolicy/train/zone-b-only"})
DEADLINE = 10.0


def until(condition: Callable[[], bool]) -> None:
    end = time.monotonic() + DEADLINE
    while not condition():
        assert time.monotonic() < end, "not reached before the deadline"
        time.sleep(0.01)


@pytest.fixture
def ready() -> list[bool]:
    return [False]


@pytest.fixture
def whatif(world: World, ready: list[bool]) -> LiveWhatIf:
    return LiveWhatIf(world.pipeline.held_view, settings=world.parts.settings.diagnosis,
                      ready=lambda: ready[0])  # fmt: skip


@pytest.fixture
def warmer(whatif: LiveWhatIf) -> Iterator[WhatIfWarmer]:
    running = WhatIfWarmer(whatif.warm, every=timedelta(milliseconds=20))
    running.start()
    try:
        yield running
    finally:
        running.stop()


def cold(world: World) -> dict[str, object]:
    """The answer with nothing held: a fresh what-if over the same view, never warmed."""
    state, policies, _, _ = world.pipeline.held_view()
    after = changed_cluster(state, policies, parse_change(DELETE))
    return blast_radius(Cluster(state, policies), after,
                        settings=world.parts.settings.diagnosis).to_dict()  # fmt: skip


def test_the_warmed_answer_is_the_cold_one(world: World, ready: list[bool], whatif: LiveWhatIf,
                                           warmer: WhatIfWarmer) -> None:  # fmt: skip
    assert not warmer.warmed.wait(0.1) and whatif.found_last == 0  # not synced: nothing found
    ready[0] = True
    assert warmer.warmed.wait(DEADLINE)
    until(lambda: whatif.found_last == 1)
    answer = whatif.whatif(parse_change(DELETE))
    assert whatif.found_last == 1  # the request found no job again
    assert answer["jobs"] and answer == cold(world)
    unwarmed = LiveWhatIf(world.pipeline.held_view, settings=world.parts.settings.diagnosis,
                          ready=lambda: True)  # fmt: skip
    assert unwarmed.whatif(parse_change(DELETE)) == answer


def test_a_new_generation_is_warmed_before_it_is_asked(world: World, ready: list[bool],
                                                       whatif: LiveWhatIf,
                                                       warmer: WhatIfWarmer) -> None:  # fmt: skip
    ready[0] = True
    until(lambda: whatif.found_last == 1)
    world.load("pods", [gpt_pod("gpt-small-worker-0", "worker", "gpu-b1", "zone-b")])
    until(lambda: whatif.found_last == 2)
    assert whatif.whatif(parse_change(DELETE)) == cold(world)
    assert whatif.found_last == 2


def test_a_failing_warm_up_keeps_the_thread_running() -> None:
    calls: list[int] = []

    def warm() -> bool:
        calls.append(1)
        if len(calls) == 1:
            raise ValueError("boom")
        return True

    running = WhatIfWarmer(warm, every=timedelta(milliseconds=10))
    running.start()
    try:
        assert running.warmed.wait(DEADLINE) and len(calls) >= 2
    finally:
        running.stop()
