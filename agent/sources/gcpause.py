"""One pause of the cyclic garbage collector shared by every bulk load of the process.

Used by `agent.sources.kube` (each informer's full list), the runtime's mirror (its bulk load) and
`zonemedic diagnose` (a snapshot's parse):
building 150,000 slim objects, then their parsed forms, creates millions of long-lived objects
that only reference counting frees; collections triggered meanwhile scan the growing heap and
cost more than the parse. Informers list on their own threads at once, so a pause is counted:
the collector runs again when the last pause ends (a pause that saved and restored
`gc.isenabled()` on its own would let the first list to end re-enable it while the pods are
still listing). A collector disabled by someone else before the first pause stays disabled.

What it does not do: collect, freeze unasked (`freeze_at_end`: the callers decide), or pause anything but the cyclic
collector (reference counting always runs).
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_depth = 0
_restore = False  # whether the collector was enabled when the first pause began
_freeze = False  # whether a pause of the current run asked for a freeze at its end


def freeze_at_end() -> None:
    """Ask that what the process holds be frozen (`gc.freeze`) when the last open pause ends:
    a bulk load's objects are long-lived, and the first collection after it would otherwise
    scan every object allocated during the pause (the young generation keeps growing while the
    collector is off: a second's pass over 150,000 pods' objects)."""
    global _freeze
    with _lock:
        _freeze = True


@contextmanager
def gc_paused() -> Iterator[None]:
    """The cyclic collector off while any pause of the process is open."""
    global _depth, _restore, _freeze
    with _lock:
        if _depth == 0:
            _restore = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                if _freeze:
                    gc.freeze()
                    _freeze = False
                if _restore:
                    gc.enable()
