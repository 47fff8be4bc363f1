"""The shared pause of the cyclic collector (`agent.sources.gcpause`)."""

from __future__ import annotations

import gc
import threading

from agent.sources.gcpause import freeze_at_end, gc_paused


def test_overlapping_pauses_keep_the_collector_off_until_the_last_ends() -> None:
    assert gc.isenabled()
    first_open, second_done = threading.Event(), threading.Event()
    seen: list[bool] = []

    def other_list() -> None:  # another informer's list, begun while the first is open
        first_open.wait(10)
        with gc_paused():
            seen.append(gc.isenabled())
        seen.append(gc.isenabled())  # ended first: the collector stays off for the other
        second_done.set()

    thread = threading.Thread(target=other_list)
    thread.start()
    with gc_paused():
        first_open.set()
        assert second_done.wait(10)
        assert not gc.isenabled()
    thread.join(10)
    assert seen == [False, False]
    assert gc.isenabled()


def test_a_freeze_asked_for_happens_when_the_last_pause_ends() -> None:
    gc.unfreeze()
    try:
        with gc_paused():
            with gc_paused():
                freeze_at_end()
            assert gc.get_freeze_count() == 0  # one pause still open
        assert gc.get_freeze_count() > 0 and gc.isenabled()
        gc.unfreeze()
        with gc_paused():
            pass
        assert gc.get_freeze_count() == 0  # asked once, frozen once
    finally:
        gc.unfreeze()


def test_a_collector_disabled_before_the_pause_stays_disabled() -> None:
    gc.disable()
    try:
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()
