"""What the twin's API server shares with the code that answers its requests.

`ApiState` holds the parts every request reads or changes: the store, authentication and RBAC,
request accounting and injected faults, discovery, the clock, the open HTTP watch streams, the
count of followed pod logs, the training model that writes pod logs (`PodActivitySource`) and
whether the server is stopping. The request handler (apihandler.py), the verbs (apiverbs.py),
watches (apiwatch.py), pod streams (apipodstreams.py) and the /twin/ endpoints (apicontrol.py)
take it as a parameter; `ApiServer` (apiserver.py) is an `ApiState` served over HTTP. It holds
no HTTP and no request logic.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from agent.twin.apidiscovery import Discovery
from agent.twin.auth import Authenticator, Authorizer
from agent.twin.faults import Accounting, Faults
from agent.twin.store import Store
from agent.twin.training_runtime import PodActivity
from agent.twin.watch import WatchStream


class PodActivitySource(Protocol):
    """The training model, as the log reads it (`TrainingRuntime.activity`)."""

    def activity(self, pod: Mapping[str, Any]) -> PodActivity | None: ...


class ApiState:
    """The server's parts and its open watch streams (see the module docstring)."""

    def __init__(
        self,
        store: Store,
        *,
        authenticator: Authenticator | None = None,
        bookmark_interval: float = 1.0,
        clock: Callable[[], float] = time.time,
        pod_activity: PodActivitySource | None = None,
    ) -> None:
        self.store = store
        self.pod_activity = pod_activity  # None: no kubelet serves logs (a bare API server)
        self.log_streams = 0  # `kubectl logs -f` streams open now
        self.authenticator = authenticator or Authenticator()
        self.authorizer = Authorizer(store)
        self.accounting = Accounting()
        self.faults = Faults()
        self.bookmark_interval = bookmark_interval
        self.clock = clock
        self._watches: set[WatchStream] = set()
        self._watch_lock = threading.Lock()
        self.stopping = False
        self.discovery = Discovery(store.serves)

    def close_watches(self) -> int:
        """Fault (and shutdown): end every open HTTP watch stream; clients must re-watch."""
        with self._watch_lock:
            streams = list(self._watches)
        for stream in streams:
            stream.close()
        return len(streams)

    def expire_history(self) -> str:
        """Fault: forget the store's history so that any older resourceVersion gets 410."""
        return self.store.compact()

    def watch_count(self) -> int:
        with self._watch_lock:
            return len(self._watches)

    def track_watch(self, stream: WatchStream, *, add: bool) -> None:
        """Remember an open HTTP watch stream (add) or forget it, for `close_watches`."""
        with self._watch_lock:
            if add:
                self._watches.add(stream)
            else:
                self._watches.discard(stream)
