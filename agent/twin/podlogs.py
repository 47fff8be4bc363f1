"""The log of a twin pod's container: the lines its simulated workload would print.

Called by the API server's `pods/{name}/log` (apipodstreams.py). The twin runs no processes, so a
container's log is written from the pod object (when the container started, restarted, exited,
with what message) and the training model's `PodActivity` (the peers the rank cannot reach and
how many times it tried, the rendezvous, training progress). The first line of every container
says that it is simulated. `LogOptions` are kubectl's query parameters (container, previous,
tailLines, sinceSeconds, sinceTime, limitBytes, timestamps); `render` applies them. Errors are the
ones a real API server and kubelet give (`ApiError`: 400 for a container name missing or not in
the pod, a container waiting to start, no previous container). Pure: objects and times in, text
out.
"""

from __future__ import annotations

import calendar
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from agent.twin.apierror import ApiError, bad_request
from agent.twin.apiquery import Query
from agent.twin.training import JobPhase
from agent.twin.training_runtime import PodActivity

Obj = Mapping[str, Any]
PROGRESS_EVERY = 10.0  # model seconds of training between two progress lines (at least a step)
MAX_PROGRESS_LINES = 1000  # the latest ones
MAX_TAIL = 1_000_000


@dataclass(frozen=True)
class LogLine:
    at: float  # wall-clock seconds
    text: str


@dataclass(frozen=True)
class LogOptions:
    container: str | None = None
    previous: bool = False
    follow: bool = False
    timestamps: bool = False
    tail_lines: int | None = None
    since_seconds: int | None = None
    since_time: float | None = None
    limit_bytes: int | None = None

    @classmethod
    def from_query(cls, query: Query) -> LogOptions:
        since_time = query.one("sinceTime")
        parsed = None
        if since_time:
            parsed = _epoch(since_time)
            if parsed is None:
                raise bad_request(f"sinceTime: invalid value {since_time!r}: expected RFC 3339")
        options = cls(
            container=query.one("container") or None,
            previous=query.flag("previous"),
            follow=query.flag("follow"),
            timestamps=query.flag("timestamps"),
            tail_lines=_count(query, "tailLines", minimum=0),
            since_seconds=_count(query, "sinceSeconds", minimum=1),
            since_time=parsed,
            limit_bytes=_count(query, "limitBytes", minimum=1),
        )
        if options.since_seconds is not None and options.since_time is not None:
            raise ApiError(422, "Invalid",
                           "PodLogOptions is invalid: at most one of sinceTime or sinceSeconds "
                           "may be specified")
        return options


def _count(query: Query, name: str, *, minimum: int) -> int | None:
    raw = query.one(name)
    if raw is None or raw == "":
        return None
    if not (raw.isascii() and raw.isdigit()) or int(raw) < minimum or int(raw) > MAX_TAIL * 1000:
        raise ApiError(422, "Invalid", f"PodLogOptions is invalid: {name}: Invalid value: {raw!r}: "
                                       f"must be a whole number of at least {minimum}")
    return int(raw)


def _epoch(stamp: object) -> float | None:
    if not isinstance(stamp, str) or not stamp:
        return None
    try:
        return float(calendar.timegm(time.strptime(stamp[:19], "%Y-%m-%dT%H:%M:%S")))
    except ValueError:
        return None


def container_of(pod: Obj, wanted: str | None) -> str:
    """The container the log is of: the one named, or the pod's only one (400 otherwise)."""
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    names = [str(c.get("name")) for c in spec.get("containers") or []]
    name = meta.get("name")
    if wanted is None:
        if len(names) == 1:
            return names[0]
        if not names:
            raise bad_request(f"a container name must be specified for pod {name}")
        raise bad_request(f"a container name must be specified for pod {name}, choose one of: "
                          f"[{' '.join(names)}]")
    if wanted not in names:
        raise bad_request(f"container {wanted} is not valid for pod {name}")
    return wanted


def _status_of(pod: Obj, container: str) -> Mapping[str, Any]:
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        if cs.get("name") == container:
            return dict(cs)
    return {}


def _spread(start: float, end: float, count: int) -> list[float]:
    """`count` times from just after `start` to `end`, evenly spaced."""
    if count <= 0:
        return []
    step = max(0.0, end - start) / count
    return [start + step * (i + 1) for i in range(count)]


def _header(container: str, pod: str, activity: PodActivity | None) -> str:
    what = f"job {activity.job}" if activity is not None else "no training workload"
    return (f"[twin] container {container} of pod {pod} started: its workload is simulated "
            f"({what}); these lines follow the twin's training model")


def _dial_lines(activity: PodActivity, start: float, attempts: int, *,
                peer: str, port: int, until: float | None = None) -> list[LogLine]:
    """One line per failed connection attempt, `retry_seconds` (model time) apart."""
    wall = activity.retry_seconds / activity.speed
    times = ([start + wall * i for i in range(1, attempts + 1)] if until is None
             else _spread(start, until, attempts))
    of = f" of {activity.connect_attempts}" if activity.exits else ""
    retry = "" if activity.exits else f", retrying in {activity.retry_seconds:g}s"
    lines = [LogLine(start, f"rendezvous: connecting to {peer}:{port}")]
    lines += [LogLine(at, f"rendezvous: connect() to {peer}:{port} timed out (attempt {i}{of})"
                          f"{retry}") for i, at in enumerate(times, 1)]
    return lines


def _progress_lines(activity: PodActivity, start: float, now: float) -> list[LogLine]:
    if activity.step_seconds is None or activity.step_seconds <= 0 or activity.steps < 1:
        return []
    done = int(activity.steps)
    every = max(1, -int(-PROGRESS_EVERY // activity.step_seconds))  # the same at every look
    target = f"/{int(activity.target)}" if activity.target is not None else ""
    lines = []
    first = max(every, (done // every - MAX_PROGRESS_LINES + 1) * every)
    for step in range(first, done + 1, every):
        at = now - (activity.steps - step) * activity.step_seconds / activity.speed
        if at >= start:
            lines.append(LogLine(at, f"step {step}{target}  step_time {activity.step_seconds:.2f}s"
                                     f"  gpu_util {activity.utilization * 100:.0f}%"))
    return lines


def current_lines(pod: Obj, container: str, activity: PodActivity | None, *,
                  now: float) -> list[LogLine]:
    """The log of the container's current run (400 while it waits to start)."""
    name = str((pod.get("metadata") or {}).get("name"))
    status = _status_of(pod, container)
    state = status.get("state") or {}
    running, terminated = state.get("running"), state.get("terminated")
    if not isinstance(running, Mapping) and not isinstance(terminated, Mapping):
        if isinstance((status.get("lastState") or {}).get("terminated"), Mapping):
            return previous_lines(pod, container, activity)  # waiting to restart: the last run
        reason = (state.get("waiting") or {}).get("reason") or "ContainerCreating"
        raise bad_request(f'container "{container}" in pod "{name}" is waiting to start: {reason}')
    run = running if isinstance(running, Mapping) else terminated
    start = _epoch((run or {}).get("startedAt")) or now
    lines = [LogLine(start, _header(container, name, activity))]
    if isinstance(terminated, Mapping):
        end = _epoch(terminated.get("finishedAt")) or now
        if activity is not None and terminated.get("reason") == "Completed":
            steps = f" after {int(activity.target)} steps" if activity.target is not None else ""
            lines += _progress_lines(activity, start, end)
            lines.append(LogLine(end, f"training finished{steps}"))
        if terminated.get("message"):
            lines.append(LogLine(end, str(terminated["message"])))
        return lines
    if activity is None:
        return lines
    if activity.dials:
        peer, port = activity.dials[0]
        lines += _dial_lines(activity, start, activity.attempts, peer=peer, port=port)
    elif activity.refused:
        lines.append(LogLine(start, f"rendezvous: waiting for {len(activity.refused)} rank(s) to "
                                    f"connect ({', '.join(activity.refused)})"))
    elif activity.phase is JobPhase.TRAINING and activity.participant:
        lines.append(LogLine(start, f"rendezvous complete: {activity.ranks} ranks"))
        lines += _progress_lines(activity, start, now)
    elif activity.phase is JobPhase.WAITING:
        lines.append(LogLine(start, f"rendezvous: waiting for the other ranks "
                                    f"({activity.ranks} running)"))
    return lines


def previous_lines(pod: Obj, container: str, activity: PodActivity | None) -> list[LogLine]:
    """The log of the container's previous run, which ended (400 when there was none)."""
    name = str((pod.get("metadata") or {}).get("name"))
    last = (_status_of(pod, container).get("lastState") or {}).get("terminated")
    if not isinstance(last, Mapping):
        raise bad_request(f'previous terminated container "{container}" in pod "{name}" not found')
    start = _epoch(last.get("startedAt")) or 0.0
    end = _epoch(last.get("finishedAt")) or start
    lines = [LogLine(start, _header(container, name, activity))]
    if activity is not None and activity.crashed is not None:
        peer, port, attempts = activity.crashed
        lines += _dial_lines(activity, start, attempts, peer=peer, port=port, until=end)
    if last.get("message"):
        lines.append(LogLine(end, str(last["message"])))
    return lines


def _stamp(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f000Z")


def select(lines: Sequence[LogLine], options: LogOptions, *, now: float) -> list[LogLine]:
    """The lines `sinceSeconds`/`sinceTime` and `tailLines` keep."""
    since = options.since_time
    if options.since_seconds is not None:
        since = now - options.since_seconds
    kept = [line for line in lines if since is None or line.at >= since]
    if options.tail_lines is not None:
        kept = kept[len(kept) - options.tail_lines:] if options.tail_lines else []
    return kept


def render(lines: Sequence[LogLine], options: LogOptions) -> bytes:
    """The lines as the log's bytes (with timestamps when asked), cut at `limitBytes`."""
    text = "".join(f"{_stamp(line.at)} {line.text}\n" if options.timestamps else f"{line.text}\n"
                   for line in lines)
    data = text.encode()
    return data[: options.limit_bytes] if options.limit_bytes is not None else data
