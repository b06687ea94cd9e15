"""Prometheus metrics, served over HTTP on `metrics.listener` (off when empty).

Names (all prefixed `odradek_`) are documented in docs/metrics.md. Counters are
updated on the event loop by the code paths that own the numbers; gauges that
are cheap to compute (partitions, segments, bytes, groups, connections,
purgatory sizes) are computed when scraped.
"""

from __future__ import annotations

import logging
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

log = logging.getLogger("odradek.broker.metrics")

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


class BrokerMetrics:
    def __init__(self, broker: Any) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self._bytes_in = Counter("odradek_topic_bytes_in", "Record bytes appended, per topic.", ["topic"], registry=r)
        self._records_in = Counter("odradek_topic_records_in", "Records appended, per topic.", ["topic"], registry=r)
        self._bytes_out = Counter("odradek_topic_bytes_out", "Record bytes sent to fetchers, per topic.", ["topic"], registry=r)
        self._requests = Counter("odradek_requests", "Requests handled, per API.", ["api"], registry=r)
        self._errors = Counter("odradek_request_failures", "Requests whose handler failed (connection closed), per API.", ["api"], registry=r)
        self._latency = Histogram("odradek_request_latency_seconds", "Time from dispatch to response written, per API.", ["api"], buckets=LATENCY_BUCKETS, registry=r)
        self._connections = Counter("odradek_connections_accepted", "Client connections accepted.", registry=r)
        r.register(_StateCollector(broker))
        self._server = None

    # hot-path hooks (cheap: label lookups are cached by prometheus_client)
    def bytes_in(self, topic: str, nbytes: int, records: int) -> None:
        self._bytes_in.labels(topic).inc(nbytes)
        self._records_in.labels(topic).inc(records)

    def bytes_out(self, topic: str, nbytes: int) -> None:
        self._bytes_out.labels(topic).inc(nbytes)

    def request_done(self, api: str, seconds: float) -> None:
        self._requests.labels(api).inc()
        self._latency.labels(api).observe(seconds)

    def request_error(self, api: str) -> None:
        self._requests.labels(api).inc()
        self._errors.labels(api).inc()

    def connection_accepted(self) -> None:
        self._connections.inc()

    def serve(self, listener: str) -> tuple[str, int]:
        from prometheus_client import start_http_server

        host, _, port = listener.rpartition(":")
        self._server, thread = start_http_server(int(port), addr=host or "127.0.0.1", registry=self.registry)
        return self._server.server_address[:2]

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server = None


class _StateCollector(Collector):
    """Gauges computed at scrape time (from the scrape thread: reads only immutable
    snapshots and plain attributes, never mutates broker state)."""

    def __init__(self, broker: Any) -> None:
        self.broker = broker

    def collect(self):
        b = self.broker
        conns = GaugeMetricFamily("odradek_connections", "Open client connections.")
        conns.add_metric([], len(b.connections))
        yield conns
        purg = GaugeMetricFamily("odradek_purgatory_size", "Delayed operations waiting, per purgatory.", labels=["purgatory"])
        purg.add_metric(["fetch"], len(b.replica_manager.fetch_purgatory))
        yield purg
        lm = b.log_manager
        if lm is not None:
            parts = GaugeMetricFamily("odradek_log_dir_partitions", "Partitions per log directory.", labels=["dir"])
            segs = GaugeMetricFamily("odradek_log_dir_segments", "Segments per log directory.", labels=["dir"])
            size = GaugeMetricFamily("odradek_log_dir_bytes", "Bytes of log segments per log directory.", labels=["dir"])
            offline = GaugeMetricFamily("odradek_log_dir_offline", "1 when a log directory is offline.", labels=["dir"])
            per_dir: dict[str, list[int]] = {d: [0, 0, 0] for d in b.config["log.dirs"]}
            for lg in list(lm.all_logs()):
                import os

                d = os.path.dirname(os.path.normpath(lg.dir))
                acc = per_dir.setdefault(d, [0, 0, 0])
                acc[0] += 1
                acc[1] += lg.segment_count
                acc[2] += lg.size_bytes
            for d, (p, s, n) in per_dir.items():
                parts.add_metric([d], p)
                segs.add_metric([d], s)
                size.add_metric([d], n)
                offline.add_metric([d], 1 if d in lm.offline_dirs else 0)
            yield from (parts, segs, size, offline)
        gc = b.group_coordinator
        snap = _group_snapshot(gc) if gc is not None else None
        if snap is not None:
            groups, members = snap
            g = GaugeMetricFamily("odradek_groups", "Consumer groups, per state.", labels=["state"])
            for state, n in groups.items():
                g.add_metric([state], n)
            yield g
            m = GaugeMetricFamily("odradek_group_members", "Members of all consumer groups.")
            m.add_metric([], members)
            yield m


_GROUP_STATES = ("Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead")


def _group_snapshot(gc: Any) -> tuple[dict[str, int], int] | None:
    """({state: groups}, members) from the group coordinator: its own `metrics_snapshot()` when it
    has one, else a read-only pass over `gc.state.groups` (copied first; retried if the event loop
    changed the dict meanwhile). Every state is reported, 0 included, so the series always exist."""
    if hasattr(gc, "metrics_snapshot"):
        return gc.metrics_snapshot()
    groups_map = getattr(getattr(gc, "state", None), "groups", None)
    if groups_map is None:
        return None
    for _ in range(3):
        try:
            groups = list(groups_map.values())
            break
        except RuntimeError:  # dictionary changed size during iteration
            continue
    else:
        return None
    counts = dict.fromkeys(_GROUP_STATES, 0)
    members = 0
    for g in groups:
        st = str(getattr(g, "state", "Unknown"))
        counts[st] = counts.get(st, 0) + 1
        members += len(getattr(g, "members", ()) or ())
    return counts, members
