"""Change tracking for the cluster cache's readers: which objects were stored, replaced or deleted
since a reader last looked.

Used by `agent.sources.cache.ClusterCache` (`track`, `drain`, and a touch for every object it
stores or deletes); read by readers that keep derived state (the runtime's parsed mirror), so they
update only what changed instead of rescanning 150,000 pods.

What it does not do: lock (the cache calls it under its own lock), or know what an object is.
"""

from __future__ import annotations

from agent.sources.podfacts import ObjKey


class Tracker:
    """What changed in a cache since the last `ClusterCache.drain`: (resource name, key) pairs in
    the order first touched; `everything` until the first drain (read it all once)."""

    def __init__(self) -> None:
        self.touched: dict[tuple[str, ObjKey], None] = {}
        self.everything = True


class Trackers:
    """Every tracker of one cache; a touch reaches each that is not reading everything anyway."""

    def __init__(self) -> None:
        self._trackers: list[Tracker] = []

    def track(self) -> Tracker:
        """A new tracker (keep it: each one costs every update a set add)."""
        tracker = Tracker()
        self._trackers.append(tracker)
        return tracker

    @staticmethod
    def drain(tracker: Tracker) -> tuple[bool, list[tuple[str, ObjKey]]]:
        """(everything, touched keys) since the last drain of `tracker`; resets it."""
        everything, touched = tracker.everything, list(tracker.touched)
        tracker.everything = False
        tracker.touched = {}
        return everything, touched

    def partial(self) -> bool:
        """Whether a touch would reach any tracker (one is not reading everything anyway)."""
        return any(not tracker.everything for tracker in self._trackers)

    def touch(self, resource_name: str, key: ObjKey) -> None:
        for tracker in self._trackers:
            if not tracker.everything:
                tracker.touched[(resource_name, key)] = None
