"""A flow's verdict put together from its two hops, each hop's answer cached by what it reads.

Called by `agent.policy.evaluator.PolicySet.check` on a verdict it has not cached. A flow passes
iff egress at the source AND ingress at the destination allow it, checked in that order (egress
first; a denial ends the check; the caveats of both allowing hops are kept, egress's first). Each
hop is decided by the blocks selecting its endpoint, and reads little else:
- egress at the source reads the source's selecting blocks, and of the destination only the
  identity labels those blocks' egress peer selectors (deny and allow rules, `toRequires`) read,
  each as one of the values they compare it with, another value or none, and its numbers for the named ports their egress rules name;
- ingress at the destination reads the destination's selecting blocks, its numbers for the named
  ports their ingress rules name, and of the source only the identity labels their ingress peer
  selectors (and `fromRequires`) read, seen the same way.
A port range matters only through the cells of the rules' port bounds it starts and ends in.
So a hop is evaluated once per (selecting blocks, what it reads of the two endpoints, cells): two
thousand destination classes that one source's rules cannot tell apart cost one evaluation, and so
do two thousand sources selected by the same blocks. An endpoint no block selects allows the hop
without evaluation; what a hop reads is worked out once per set of selecting blocks (a new
endpoint selected by known blocks reuses it). The hop itself is the evaluator's (`hop`, given);
this module decides only what a cached answer may stand for. The uncached path (`PolicySet.trace`) evaluates every hop
afresh: tests compare the two. Pure: no I/O.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Mapping
from typing import Protocol as Shape

from agent.model.network import Caveat, FlowVerdict, Hop, PortRange, Protocol
from agent.policy.rule import Subject

HopResult = tuple[FlowVerdict | None, tuple[Caveat, ...]]  # the denial, or None and the caveats
_OPEN: HopResult = (None, ())
_ALLOWED = FlowVerdict(allowed=True)
_PROTOCOLS = (Protocol.TCP, Protocol.UDP, Protocol.SCTP)
# (the peer's label values for the keys read, the peer's named port numbers for the names read)
_PeerKey = tuple[tuple[str | int | None, ...], tuple[int | None, ...]]
_Reads = tuple[tuple[str, ...], tuple[frozenset[str], ...], tuple[str, ...], tuple[int, ...]]
_OTHER = 0  # a label value no selector of the hop compares with (Exists sees it, nothing else)


class _Block(Shape):
    @property
    def subject(self) -> Subject: ...


class Side(Shape):
    """An endpoint as the evaluator holds it (projected labels, named ports, selecting blocks)."""

    @property
    def labels(self) -> Mapping[str, str]: ...

    @property
    def named_ports(self) -> Mapping[tuple[str, Protocol], int]: ...

    @property
    def selected(self) -> tuple[_Block, ...]: ...


def _reads(side: Side, *, egress: bool) -> _Reads:
    """What the hop at `side` reads: the peer label keys with the values its selectors compare
    them with, the named ports (the destination's) and the bounds of its rules' numbered port
    intervals (each `lo` and `hi + 1`)."""
    keys: set[str] = set()
    values: dict[str, set[str]] = {}
    names: set[str] = set()
    bounds: set[int] = set()
    for block in side.selected:
        s = block.subject
        rules = s.egress + s.egress_deny if egress else s.ingress + s.ingress_deny
        selectors = [sel for rule in rules for sel in rule.peers]
        selectors.extend(s.egress_requires if egress else s.ingress_requires)
        for sel in selectors:
            keys |= sel.keys()
            for key, value in sel.values():
                values.setdefault(key, set()).add(value)
        for rule in rules:
            names |= rule.port_names()
            if rule.ports is None:
                bounds.update((0, 65536))
            for port in rule.ports or ():
                if port.name is None:
                    bounds.update((port.first, port.last + 1))
    ordered = tuple(sorted(keys))
    return (ordered, tuple(frozenset(values.get(k, ())) for k in ordered), tuple(sorted(names)),
            tuple(sorted(bounds)))  # fmt: skip


def _cells(bounds: tuple[int, ...], numbers: tuple[int | None, ...], ports: PortRange
           ) -> tuple[str, int, int]:  # fmt: skip
    """The port range as the hop's rules see it: its protocol and the cells (between consecutive
    bounds, named port numbers included) its first and last ports fall in. Every interval of
    the rules is a union of cells, so ranges in the same cells overlap and are covered alike."""
    if numbers and any(n is not None for n in numbers):
        bounds = tuple(sorted({*bounds, *(x for n in numbers if n is not None
                                          for x in (n, n + 1))}))  # fmt: skip
    return (ports.protocol.value, bisect_right(bounds, ports.first),
            bisect_right(bounds, ports.last))  # fmt: skip


class HopVerdicts:
    """The hop cache of one policy set. A hop's answer is keyed by the blocks selecting its
    endpoint (the same blocks decide alike for every endpoint they select), the far endpoint's
    labels its rules read, the destination's numbers for the named ports they name, and the
    port range's cells; `at` ids are the set's endpoint ids."""

    def __init__(self, hop: Callable[[Hop, Side, Side, PortRange], HopResult], *,
                 limit: int) -> None:  # fmt: skip
        self._hop = hop
        self._limit = limit
        self._reads: dict[tuple[int, Hop], tuple[int, int, _Reads]] = {}
        self._blocks: dict[tuple[int, ...], int] = {}
        self._read_ids: dict[tuple[bool, _Reads], int] = {}  # many blocks read the same
        self._by_blocks: dict[tuple[tuple[int, ...], bool], tuple[int, int, _Reads]] = {}
        self._cache: dict[tuple[Hop, int, _PeerKey, tuple[str, int, int]], HopResult] = {}
        # (what is read, far end's id, the destination's id when an ingress hop reads its ports)
        self._peers: dict[tuple[int, int, int], _PeerKey] = {}

    def _result(self, hop: Hop, at: int, away: int, *, near: Side, far: Side, src: Side,
                dst: Side, ports: PortRange) -> HopResult:  # fmt: skip
        """The hop at `near` (id `at`) towards `far` (id `away`)."""
        if not near.selected:
            return _OPEN
        reads = self._reads.get((at, hop))
        if reads is None:
            blocks = tuple(map(id, near.selected))  # the set holds its blocks: ids stay unique
            egress = hop is Hop.EGRESS
            reads = self._by_blocks.get((blocks, egress))  # what the same blocks read
            if reads is None:
                sig = self._blocks.setdefault(blocks, len(self._blocks))
                read = _reads(near, egress=egress)
                rid = self._read_ids.setdefault((egress, read), len(self._read_ids))
                reads = self._by_blocks[(blocks, egress)] = (sig, rid, read)
            self._reads[(at, hop)] = reads
        sig, rid, (keys, compared, names, bounds) = reads
        pkey = (rid, away, at if names and hop is Hop.INGRESS else -1)
        peer = self._peers.get(pkey)
        if peer is None:
            if len(self._peers) >= self._limit:
                self._peers.clear()
            get = far.labels.get
            peer = self._peers[pkey] = (
                tuple(v if v is None or v in c else _OTHER
                      for v, c in zip(map(get, keys), compared, strict=True)),
                tuple(dst.named_ports.get((n, p)) for n in names for p in _PROTOCOLS))  # fmt: skip
        key = (hop, sig, peer, _cells(bounds, peer[1], ports))
        found = self._cache.get(key)
        if found is None:
            if len(self._cache) >= self._limit:
                self._cache.clear()
            found = self._cache[key] = self._hop(hop, src, dst, ports)
        return found

    def allows(self, s: int, d: int, src: Side, dst: Side, ports: PortRange, *,
               egress: bool) -> bool:  # fmt: skip
        """Whether one hop of the flow from `src` (id `s`) to `dst` (id `d`) allows `ports`:
        egress at `src`, or ingress at `dst` (the hop `verdict` asks, cached alike)."""
        if egress:
            found = self._result(Hop.EGRESS, s, d, near=src, far=dst, src=src, dst=dst,
                                 ports=ports)  # fmt: skip
        else:
            found = self._result(Hop.INGRESS, d, s, near=dst, far=src, src=src, dst=dst,
                                 ports=ports)  # fmt: skip
        return found[0] is None

    def verdict(self, s: int, d: int, src: Side, dst: Side, ports: PortRange) -> FlowVerdict:
        """The verdict of the flow from `src` (id `s`) to `dst` (id `d`) on `ports`."""
        denial, out = self._result(Hop.EGRESS, s, d, near=src, far=dst, src=src, dst=dst,
                                    ports=ports)  # fmt: skip
        if denial is not None:
            return denial
        denial, back = self._result(Hop.INGRESS, d, s, near=dst, far=src, src=src, dst=dst,
                                     ports=ports)  # fmt: skip
        if denial is not None:
            return denial
        caveats = out + back
        return FlowVerdict(True, caveats=tuple(dict.fromkeys(caveats))) if caveats else _ALLOWED
