"""Planning logic without Spark jobs or a broker: options, rate limits, splits, load widening."""

from __future__ import annotations

import pytest

from odradek.pipeline.load import widen
from odradek.spark.options import OptionError, parse_duration, parse_sink_options, parse_source_options
from odradek.spark.planner import OffsetRange, rate_limit, split_ranges
from odradek.spark.reader import OdradekStreamReader, from_json_offsets, to_json_offsets

BS = {"kafka.bootstrap.servers": "127.0.0.1:1"}


def test_rate_limit_never_exceeds_and_is_proportional():
    start = {("t", 0): 0, ("t", 1): 0, ("t", 2): 100}
    latest = {("t", 0): 1000, ("t", 1): 10, ("t", 2): 101}
    end = rate_limit(start, latest, 300)
    took = {tp: end[tp] - start[tp] for tp in end}
    assert sum(took.values()) == 300
    assert took[("t", 0)] > took[("t", 1)] >= took[("t", 2)]
    assert rate_limit(start, latest, 5000) == latest


def test_split_ranges_min_partitions():
    rs = [OffsetRange("t", 0, 0, 1000), OffsetRange("t", 1, 0, 10), OffsetRange("t", 2, 5, 5)]
    out = split_ranges(rs, 6)
    assert len(out) >= 6
    for p in (0, 1):
        parts = sorted((r.start, r.end) for r in out if r.partition == p)
        assert parts[0][0] == 0 and all(a[1] == b[0] for a, b in zip(parts, parts[1:]))
    assert sum(r.size for r in out) == 1010
    assert [r for r in split_ranges(rs, None)] == rs[:2]
    assert all(r.size <= 100 for r in split_ranges(rs, None, 100))


def test_options():
    o = parse_source_options(
        {
            **BS,
            "subscribe": "a, b",
            "startingOffsets": '{"a":{"0":5,"1":-2}}',
            "maxOffsetsPerTrigger": "10",
            "minOffsetsPerTrigger": "5",
            "maxTriggerDelay": "2m",
            "kafka.fetch.max.bytes": "1000",
        },
        streaming=True,
    )
    assert o.subscribe == ["a", "b"] and o.starting == {("a", 0): 5, ("a", 1): -2}
    assert o.max_trigger_delay_s == 120 and o.consumer_config["fetch.max.bytes"] == 1000
    with pytest.raises(OptionError, match="minOffsetsPerTrigger must not exceed"):
        parse_source_options({**BS, "subscribe": "a", "maxOffsetsPerTrigger": "1", "minOffsetsPerTrigger": "5"}, True)
    with pytest.raises(OptionError, match="maxTriggerDelay needs minOffsetsPerTrigger"):
        parse_source_options({**BS, "subscribe": "a", "maxTriggerDelay": "1m"}, True)
    with pytest.raises(OptionError, match="endingoffsets"):
        parse_source_options({**BS, "subscribe": "a", "endingOffsets": "latest"}, True)
    with pytest.raises(OptionError, match="earliest"):
        parse_source_options({**BS, "subscribe": "a", "endingOffsets": '{"a":{"0":-2}}'}, False)
    with pytest.raises(OptionError, match="kafka.value.serializer"):
        parse_sink_options({**BS, "kafka.value.serializer": "x"})
    assert (
        parse_sink_options(
            {**BS, "kafka.partitioner.class": "org.apache.kafka.clients.producer.RoundRobinPartitioner"}
        ).producer_config["partitioner"]
        == "round_robin"
    )
    assert parse_duration("x", "500ms") == 0.5 and parse_duration("x", "1h") == 3600


class FakePlanner:
    def __init__(self, latest):
        self.latest_offsets = latest

    def topic_partitions(self):
        return set(self.latest_offsets)

    def latest(self, tps):
        return {tp: self.latest_offsets[tp] for tp in tps}

    def earliest(self, tps):
        return {tp: 0 for tp in tps}


def test_stream_min_offsets_and_trigger_delay():
    from pyspark.sql.streaming.datasource import ReadMinRows

    o = parse_source_options({**BS, "subscribe": "t", "minOffsetsPerTrigger": "100", "maxTriggerDelay": "200ms"}, True)
    r = OdradekStreamReader(o)
    r._planner = FakePlanner({("t", 0): 50})
    start = to_json_offsets({("t", 0): 0})
    assert r.getDefaultReadLimit() == ReadMinRows(100)
    assert r.latestOffset(start, ReadMinRows(100)) == start  # not enough yet
    r._last_trigger -= 1  # the delay passed
    assert from_json_offsets(r.latestOffset(start, ReadMinRows(100))) == {("t", 0): 50}
    r._planner.latest_offsets = {("t", 0): 200, ("t", 1): 30}  # enough rows, and a new partition
    assert from_json_offsets(r.latestOffset(to_json_offsets({("t", 0): 50}), ReadMinRows(100))) == {
        ("t", 0): 200,
        ("t", 1): 30,
    }
    assert r.reportLatestOffset() == {"t": {"0": 200, "1": 30}}


def test_available_now_caps_at_target():
    from pyspark.sql.streaming.datasource import ReadMaxRows

    o = parse_source_options({**BS, "subscribe": "t", "maxOffsetsPerTrigger": "40"}, True)
    r = OdradekStreamReader(o)
    r._planner = FakePlanner({("t", 0): 100})
    r.prepareForTriggerAvailableNow()
    r._planner.latest_offsets = {("t", 0): 1000}  # arrives later: not part of this run
    off, ends = to_json_offsets({("t", 0): 0}), []
    while True:
        nxt = r.latestOffset(off, ReadMaxRows(40))
        if nxt == off:
            break
        ends.append(nxt["t"]["0"])
        off = nxt
    assert ends == [40, 80, 100]


def test_widen_replaces_overlapping_loads():
    loads = [
        {"id": "a", "ranges": {"t": {"0": [0, 100]}}},
        {"id": "b", "ranges": {"t": {"0": [100, 200]}}},
        {"id": "c", "ranges": {"t": {"1": [0, 50]}}},
    ]
    req, rep = widen({("t", 0): (50, 150)}, loads)
    assert req == {("t", 0): (0, 200)} and sorted(rep) == ["a", "b"]
    req, rep = widen({("t", 0): (200, 300)}, loads)
    assert req == {("t", 0): (200, 300)} and rep == []
