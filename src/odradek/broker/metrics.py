"""Prometheus metrics, served over HTTP on `metrics.listener` (off when empty).

Names (all prefixed `odradek_`) are documented in docs/metrics.md. Counters are
updated on the event loop by the code paths that own the numbers (as plain ints:
cheap enough for every request); gauges that
are cheap to compute (partitions, segments, bytes, groups, connections,
purgatory sizes) are computed when scraped, by `collect()` callables registered for each
component (`BrokerMetrics.register`): each gets only the part of the broker it reads
(`connection_gauges`, `purgatory_gauges`, `log_dir_gauges`, `replication_gauges`,
`controller_gauges`, `group_gauges`; broker/server.py registers them).
"""

from __future__ import annotations

import logging
import os
import time
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, Sized
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

if TYPE_CHECKING:
    from odradek.broker.partition import Partition
    from odradek.cluster.controller import Controller
    from odradek.cluster.metadata import ClusterSnapshot
    from odradek.storage import LogManager

log = logging.getLogger("odradek.broker.metrics")

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
_LE = tuple(floatToGoString(b) for b in LATENCY_BUCKETS) + ("+Inf",)

AUTH_FAILURE_PEERS = 1000

# Gauges of one component, computed at scrape time (see `BrokerMetrics.register`).
Collect = Callable[[], Iterable[Metric]]


class BrokerMetrics:
    """The hot-path hooks add to plain ints in dicts (a prometheus_client labelled Counter or
    Histogram costs 3-7 µs per update: label lookup, locks, a bucket scan; these cost well
    under 1 µs); `_HotCollector` turns them into the same families when scraped."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        # topic -> [bytes, records, created]
        self.topics_in: dict[str, list] = {}
        self.topics_out: dict[str, list] = {}
        # api -> [requests, failures, created]
        self.requests: dict[str, list] = {}
        # api -> [bucket counts (len(LATENCY_BUCKETS) + 1, the last one +Inf only), sum, created]
        self.latency: dict[str, list] = {}
        self.accepted = [0, time.time()]
        self.isr_shrinks = [0, time.time()]
        self.isr_expands = [0, time.time()]
        # (listener, client host) -> [failed authentications, created]; at most AUTH_FAILURE_PEERS hosts,
        # the rest counted under host "other" (a scan from many addresses must not grow this without bound)
        self.auth_failures: dict[tuple[str, str], list] = {}
        self.registry.register(_HotCollector(self))
        self._server: Any = None

    def register(self, collect: Collect) -> None:
        """Add a component's gauges, computed when scraped: `collect()` runs on the scrape
        thread, so it may read only immutable snapshots, plain attributes and copies of dicts
        (retried if the event loop changed one meanwhile), and never mutates broker state
        (docs/architecture.md)."""
        self.registry.register(_Gauges(collect))

    # hot-path hooks (event loop only)
    def bytes_in(self, topic: str, nbytes: int, records: int) -> None:
        c = self.topics_in.get(topic)
        if c is None:
            c = self.topics_in[topic] = [0, 0, time.time()]
        c[0] += nbytes
        c[1] += records

    def bytes_out(self, topic: str, nbytes: int, records: int = 0) -> None:
        c = self.topics_out.get(topic)
        if c is None:
            c = self.topics_out[topic] = [0, 0, time.time()]
        c[0] += nbytes
        c[1] += records

    def request_done(self, api: str, seconds: float) -> None:
        r = self.requests.get(api)
        if r is None:
            r = self.requests[api] = [0, 0, time.time()]
        r[0] += 1
        h = self.latency.get(api)
        if h is None:
            h = self.latency[api] = [[0] * (len(LATENCY_BUCKETS) + 1), 0.0, time.time()]
        h[0][bisect_left(LATENCY_BUCKETS, seconds)] += 1
        h[1] += seconds

    def request_error(self, api: str) -> None:
        r = self.requests.get(api)
        if r is None:
            r = self.requests[api] = [0, 0, time.time()]
        r[0] += 1
        r[1] += 1

    def connection_accepted(self) -> None:
        self.accepted[0] += 1

    def authentication_failed(self, listener: str, host: str) -> None:
        key = (listener, host)
        c = self.auth_failures.get(key)
        if c is None:
            if len(self.auth_failures) >= AUTH_FAILURE_PEERS:
                key = (listener, "other")
                c = self.auth_failures.get(key)
            if c is None:
                c = self.auth_failures[key] = [0, time.time()]
        c[0] += 1

    def isr_changed(self, *, shrunk: bool) -> None:
        (self.isr_shrinks if shrunk else self.isr_expands)[0] += 1

    def serve(self, listener: str) -> tuple[str, int]:
        from prometheus_client import start_http_server

        host, _, port = listener.rpartition(":")
        server, _thread = start_http_server(int(port), addr=host or "127.0.0.1", registry=self.registry)
        self._server = server
        bound_host, bound_port = server.server_address[:2]
        return str(bound_host), int(bound_port)

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server = None


class _HotCollector(Collector):
    """The counters and the latency histogram, read from the scrape thread. Dicts are copied
    first (atomic under the GIL); a histogram's count is the sum of its buckets, so the two
    always agree (its sum may be one observation behind)."""

    def __init__(self, m: BrokerMetrics) -> None:
        self.m = m

    def collect(self):
        m = self.m
        for name, doc, table, i in (
            ("odradek_topic_bytes_in", "Record bytes appended, per topic.", m.topics_in, 0),
            ("odradek_topic_records_in", "Records appended, per topic.", m.topics_in, 1),
            ("odradek_topic_bytes_out", "Record bytes sent to fetchers, per topic.", m.topics_out, 0),
            ("odradek_topic_records_out", "Records (offsets) sent to fetchers, per topic.", m.topics_out, 1),
        ):
            fam = CounterMetricFamily(name, doc, labels=["topic"])
            for topic, c in dict(table).items():
                fam.add_metric([topic], c[i], created=c[2])
            yield fam
        reqs = dict(m.requests)
        fam = CounterMetricFamily("odradek_requests", "Requests handled, per API.", labels=["api"])
        for api, r in reqs.items():
            fam.add_metric([api], r[0], created=r[2])
        yield fam
        fam = CounterMetricFamily(
            "odradek_request_failures", "Requests whose handler failed (connection closed), per API.", labels=["api"]
        )
        for api, r in reqs.items():
            if r[1]:
                fam.add_metric([api], r[1], created=r[2])
        yield fam
        hist = HistogramMetricFamily(
            "odradek_request_latency_seconds", "Time from dispatch to response written, per API.", labels=["api"]
        )
        for api, (counts, total, created) in dict(m.latency).items():
            acc = 0
            buckets = []
            for le, n in zip(_LE, list(counts)):
                acc += n
                buckets.append((le, float(acc)))
            hist.add_metric([api], buckets, total)
            hist.samples.append(Sample("odradek_request_latency_seconds_created", {"api": api}, created))
        yield hist
        n, created = m.accepted
        yield CounterMetricFamily(
            "odradek_connections_accepted", "Client connections accepted.", value=n, created=created
        )
        fam = CounterMetricFamily(
            "odradek_failed_authentication",
            "Failed SASL authentications, per listener and client host (Kafka's failed-authentication-total).",
            labels=["listener", "host"],
        )
        for (listener, host), c in dict(m.auth_failures).items():
            fam.add_metric([listener, host], c[0], created=c[1])
        yield fam
        n, created = m.isr_shrinks
        yield CounterMetricFamily(
            "odradek_isr_shrinks", "ISR shrinks of partitions led here.", value=n, created=created
        )
        n, created = m.isr_expands
        yield CounterMetricFamily(
            "odradek_isr_expands", "ISR expansions of partitions led here.", value=n, created=created
        )


class _Gauges(Collector):
    def __init__(self, collect: Collect) -> None:
        self._collect = collect

    def collect(self) -> Iterable[Metric]:
        return self._collect()


def connection_gauges(count: Callable[[], int]) -> Collect:
    def collect() -> Iterator[Metric]:
        conns = GaugeMetricFamily("odradek_connections", "Open client connections.")
        conns.add_metric([], count())
        yield conns

    return collect


def purgatory_gauges(fetch: Sized, produce: Sized) -> Collect:
    def collect() -> Iterator[Metric]:
        purg = GaugeMetricFamily(
            "odradek_purgatory_size", "Delayed operations waiting, per purgatory.", labels=["purgatory"]
        )
        purg.add_metric(["fetch"], len(fetch))
        purg.add_metric(["produce"], len(produce))
        yield purg

    return collect


def log_dir_gauges(log_manager: LogManager, log_dirs: Iterable[str]) -> Collect:
    """Partitions, segments, bytes and offline state per log directory."""
    dirs = list(log_dirs)

    def collect() -> Iterator[Metric]:
        lm = log_manager
        parts = GaugeMetricFamily("odradek_log_dir_partitions", "Partitions per log directory.", labels=["dir"])
        segs = GaugeMetricFamily("odradek_log_dir_segments", "Segments per log directory.", labels=["dir"])
        size = GaugeMetricFamily("odradek_log_dir_bytes", "Bytes of log segments per log directory.", labels=["dir"])
        offline = GaugeMetricFamily("odradek_log_dir_offline", "1 when a log directory is offline.", labels=["dir"])
        per_dir: dict[str, list[int]] = {d: [0, 0, 0] for d in dirs}
        for lg in list(lm.all_logs()):
            d = os.path.dirname(os.path.normpath(lg.dir))
            acc = per_dir.setdefault(d, [0, 0, 0])
            acc[0] += 1
            acc[1] += lg.segment_count
            acc[2] += lg.size_bytes
        for d, (p, n_segs, n_bytes) in per_dir.items():
            parts.add_metric([d], p)
            segs.add_metric([d], n_segs)
            size.add_metric([d], n_bytes)
            offline.add_metric([d], 1 if d in lm.offline_dirs else 0)
        yield from (parts, segs, size, offline)

    return collect


def replication_gauges(partitions: Callable[[], Iterable[Partition]]) -> Collect:
    """Under-replicated partitions led here, and each follower's lag behind the leader (records)."""

    def collect() -> Iterator[Metric]:
        under = GaugeMetricFamily("odradek_under_replicated_partitions", "Partitions led here with an incomplete ISR.")
        lag = GaugeMetricFamily(
            "odradek_replica_lag_records",
            "How many records a follower is behind the leader (partitions led here).",
            labels=["topic", "partition", "replica"],
        )
        n = 0
        for part in list(partitions()):
            if not part.is_leader:
                continue
            if len(part.isr) < len(part.replicas):
                n += 1
            leo = part.log_end_offset
            for r, st in list(part.followers.items()):
                if st.log_end_offset >= 0:
                    lag.add_metric([part.topic, str(part.partition), str(r)], max(leo - st.log_end_offset, 0))
        under.add_metric([], n)
        yield under
        yield lag

    return collect


def controller_gauges(controller: Controller | None, snapshot: Callable[[], ClusterSnapshot]) -> Collect:
    """Whether this broker is the controller, and, on the active controller, partitions without
    a leader (Kafka reports offline partitions from the controller only)."""

    def collect() -> Iterator[Metric]:
        active = GaugeMetricFamily("odradek_active_controller", "1 on the broker that is the controller.")
        active.add_metric([], 1 if controller is not None and controller.active else 0)
        yield active
        if controller is not None and controller.active:
            offline = GaugeMetricFamily("odradek_offline_partitions", "Partitions without a leader (controller only).")
            offline.add_metric([], sum(1 for t in snapshot().topics.values() for p in t.partitions if p.leader < 0))
            yield offline

    return collect


def group_gauges(metrics_snapshot: Callable[[], tuple[dict[str, int], int] | None]) -> Collect:
    """Consumer groups per state and their members (the group coordinator's `metrics_snapshot`)."""

    def collect() -> Iterator[Metric]:
        snap = metrics_snapshot()
        if snap is not None:
            groups, members = snap
            g = GaugeMetricFamily("odradek_groups", "Consumer groups, per state.", labels=["state"])
            for state, n in groups.items():
                g.add_metric([state], n)
            yield g
            m = GaugeMetricFamily("odradek_group_members", "Members of all consumer groups.")
            m.add_metric([], members)
            yield m

    return collect
