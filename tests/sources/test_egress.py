"""Egress source: the one query per refresh against a real Prometheus (backfilled by promtool) with
Beyla's and OBI's counters as they label them, and its failure modes (down: unavailable, never an
exception; no counter: no exporter answered)."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from agent.model.egress import EgressCounter, EgressExporter, FlowEnd
from agent.settings import EgressSettings, EgressSource, PrometheusSettings
from agent.sources.egress import EgressMeter as Source
from agent.sources.egress import egress_expr, parse_flows
from agent.sources.prometheus import PrometheusSource
from tests.support.prometheus import free_port, requires_prometheus, running_prometheus

STEP = 30
END = ("k8s_src_namespace", "k8s_src_owner_name", "k8s_src_name",
       "k8s_dst_namespace", "k8s_dst_owner_name", "k8s_dst_name")  # fmt: skip


def _series(name: str, labels: dict[str, str], rate: float, now: int) -> list[str]:
    text = ",".join(f'{k}="{v}"' for k, v in labels.items())
    start = now - 2 * 3600
    return [f"{name}{{{text}}} {rate * (t - start):.0f} {t}" for t in range(start, now + 1, STEP)]


def _pods(src: str, dst: str, *, ns: str = "ml", owner: str = "resnet") -> dict[str, str]:
    return dict(zip(END, (ns, owner, src, ns, owner, dst), strict=True))


def _openmetrics(now: int, *, beyla: bool = True, obi: bool = True) -> str:
    lines: list[str] = []
    if beyla:
        lines.append("# TYPE beyla_network_flow_bytes counter")
        flow = "beyla_network_flow_bytes_total"
        # resnet: the workers in zone-a talk to the master in zone-b (pod names included)
        lines += _series(flow, _pods("resnet-worker-0", "resnet-master-0")
                         | {"src_zone": "zone-a", "dst_zone": "zone-b"}, 1000.0, now)
        lines += _series(flow, _pods("resnet-master-0", "resnet-worker-0")
                         | {"src_zone": "zone-b", "dst_zone": "zone-a"}, 500.0, now)
        # traffic inside one zone is not egress
        lines += _series(flow, _pods("resnet-worker-0", "resnet-worker-1")
                         | {"src_zone": "zone-a", "dst_zone": "zone-a"}, 9000.0, now)
        # a flow counter without zone attributes says nothing about zones
        lines += _series(flow, _pods("bert-0", "bert-1", owner="bert"), 7000.0, now)
        lines.append("# TYPE beyla_network_inter_zone_bytes counter")
        # the inter-zone counter with its default attributes: zones only
        lines += _series("beyla_network_inter_zone_bytes_total",
                         {"k8s_cluster_name": "c1", "src_zone": "zone-a", "dst_zone": "zone-b"},
                         1500.0, now)
    if obi:
        lines.append("# TYPE obi_network_inter_zone_bytes counter")
        # OBI's inter-zone counter with owner attributes added (no pod names)
        owners = dict(zip(END, ("nlp", "gpt", "", "nlp", "gpt", ""), strict=True))
        lines += _series("obi_network_inter_zone_bytes_total",
                         {k: v for k, v in owners.items() if v}
                         | {"src_zone": "zone-c", "dst_zone": "zone-a"}, 2000.0, now)
    return "\n".join(lines) + "\n# EOF\n"


def _source(url: str, **kw: object) -> Source:
    prometheus = PrometheusSource(PrometheusSettings(url=url, timeout=timedelta(seconds=5),
                                                     retries=0))  # fmt: skip
    return Source(prometheus, EgressSettings(**kw))  # type: ignore[arg-type]


@requires_prometheus
def test_beyla_and_obi_counters_in_one_query_against_real_prometheus(tmp_path: Path) -> None:
    now = int(time.time()) // STEP * STEP
    with running_prometheus(tmp_path, openmetrics=_openmetrics(now)) as prom:
        at = datetime.fromtimestamp(now, UTC)
        report = _source(prom.url).fetch(at)
        assert report is not None and report.available, report
        assert report.measured and report.exporters == {EgressExporter.BEYLA, EgressExporter.OBI}
        rows = {(f.exporter, f.counter, f.src, f.dst): f for f in report.flows}
        w0 = FlowEnd("ml", "resnet", "resnet-worker-0")
        m0 = FlowEnd("ml", "resnet", "resnet-master-0")
        beyla = (EgressExporter.BEYLA, EgressCounter.FLOW)
        assert rows[(*beyla, w0, m0)].bytes_per_second == pytest.approx(1000.0, rel=0.05)
        assert rows[(*beyla, m0, w0)].bytes_per_second == pytest.approx(500.0, rel=0.05)
        assert (rows[(*beyla, w0, m0)].src_zone, rows[(*beyla, w0, m0)].dst_zone) == (
            "zone-a", "zone-b")
        gpt = FlowEnd("nlp", "gpt", "")
        obi = rows[(EgressExporter.OBI, EgressCounter.INTER_ZONE, gpt, gpt)]
        assert obi.bytes_per_second == pytest.approx(2000.0, rel=0.05)
        # same-zone, zone-less and unattributable (zones-only) series are not rows
        assert len(report.flows) == 3

        only_obi = _source(prom.url, source=EgressSource.OBI).fetch(at)
        assert only_obi is not None and only_obi.exporters == {EgressExporter.OBI}
        assert [f.exporter for f in only_obi.flows] == [EgressExporter.OBI]

        query = _source(prom.url, source=EgressSource.QUERY, query=(
            'sum by (k8s_src_namespace, k8s_src_owner_name, k8s_dst_namespace, '
            'k8s_dst_owner_name) (rate(obi_network_inter_zone_bytes_total[$window]))'),
            window=timedelta(minutes=10)).fetch(at)  # fmt: skip
        assert query is not None and query.exporters == {EgressExporter.QUERY}
        (row,) = query.flows
        assert (row.src, row.counter) == (gpt, EgressCounter.QUERY)
        assert row.bytes_per_second == pytest.approx(2000.0, rel=0.05)
        assert query.window == timedelta(minutes=10)


@requires_prometheus
def test_no_counter_means_no_exporter_answered(tmp_path: Path) -> None:
    now = int(time.time()) // STEP * STEP
    text = "# TYPE other counter\n" + "\n".join(
        _series("other_total", {"a": "b"}, 1.0, now)) + "\n# EOF\n"
    with running_prometheus(tmp_path, openmetrics=text) as prom:
        report = _source(prom.url).fetch(datetime.fromtimestamp(now, UTC))
        assert report is not None and report.available
        assert not report.measured and report.flows == ()


@requires_prometheus
def test_an_exporter_with_only_same_zone_traffic_measures_nothing_crossing(
    tmp_path: Path,
) -> None:
    now = int(time.time()) // STEP * STEP
    text = "# TYPE beyla_network_flow_bytes counter\n" + "\n".join(_series(
        "beyla_network_flow_bytes_total",
        _pods("resnet-worker-0", "resnet-worker-1") | {"src_zone": "zone-a", "dst_zone": "zone-a"},
        100.0, now)) + "\n# EOF\n"  # fmt: skip
    with running_prometheus(tmp_path, openmetrics=text) as prom:
        report = _source(prom.url, source=EgressSource.BEYLA).fetch(
            datetime.fromtimestamp(now, UTC))
        assert report is not None and report.measured
        assert report.exporters == {EgressExporter.BEYLA} and report.flows == ()


@requires_prometheus
def test_a_flow_younger_than_the_window_reads_its_own_rate(tmp_path: Path) -> None:
    """A job split 10 minutes ago, measured over the last hour: 2,000 B/s, not a sixth of it."""
    now = int(time.time()) // STEP * STEP
    labels = _pods("resnet-worker-0", "resnet-master-0") | {"src_zone": "a", "dst_zone": "b"}
    text = ",".join(f'{k}="{v}"' for k, v in labels.items())
    start = now - 600
    lines = ["# TYPE beyla_network_flow_bytes counter"] + [
        f"beyla_network_flow_bytes_total{{{text}}} {2000 * (t - start)} {t}"
        for t in range(start, now + 1, STEP)]  # fmt: skip
    with running_prometheus(tmp_path, openmetrics="\n".join(lines) + "\n# EOF\n") as prom:
        report = _source(prom.url, source=EgressSource.BEYLA).fetch(
            datetime.fromtimestamp(now, UTC))
        assert report is not None
        (row,) = report.flows
        assert row.bytes_per_second == pytest.approx(2000.0, rel=0.1)


def test_prometheus_down_is_unavailable_not_a_crash() -> None:
    report = _source(f"http://127.0.0.1:{free_port()}").fetch(datetime.now(UTC))
    assert report is not None and not report.available and not report.measured
    assert (report.error or "").startswith("metrics unavailable")


def test_source_none_asks_nothing() -> None:
    source = _source(f"http://127.0.0.1:{free_port()}", source=EgressSource.NONE)
    assert source.expr is None and source.fetch(datetime.now(UTC)) is None


def test_query_shapes() -> None:
    auto = egress_expr(EgressSettings())
    assert auto is not None
    for prefix in ("beyla", "obi"):
        assert f"{prefix}_network_inter_zone_bytes_total[3600s]" in auto
        assert f'{prefix}_network_flow_bytes_total{{src_zone!=""}}[3600s]' in auto
    assert "k8s_dst_owner_name" in auto
    beyla = egress_expr(EgressSettings(source=EgressSource.BEYLA, window=timedelta(minutes=5)))
    assert beyla is not None and "obi_" not in beyla and "[300s]" in beyla
    custom = egress_expr(EgressSettings(source=EgressSource.QUERY, query="rate(x[$window])",
                                        window=timedelta(minutes=2)))  # fmt: skip
    assert custom is not None and "rate(x[120s])" in custom and "$window" not in custom


@pytest.mark.parametrize(
    "sample",
    [
        {"metric": {"zonemedic_exporter": "beyla", "zonemedic_counter": "flow"}, "value": [0, "x"]},
        {"metric": {"zonemedic_exporter": "beyla", "zonemedic_counter": "flow"}, "value": [0, "-1"]},
        {"metric": {"zonemedic_exporter": "beyla", "zonemedic_counter": "flow"}, "value": [0, "NaN"]},
        {"metric": {"zonemedic_exporter": "nobody"}, "value": [0, "5"]},
        {"metric": "not a mapping", "value": [0, "5"]},
        "not a sample",
    ],
)  # fmt: skip
def test_unreadable_rows_are_skipped(sample: object) -> None:
    at = datetime.now(UTC)
    report = parse_flows([sample], at=at, window=timedelta(hours=1))
    assert report.available and report.flows == ()
