"""File descriptors independent of the partition count (issue 28): a broker process under a
low open-file limit (``prlimit``) keeps its descriptors under its bound while far more
partitions than the bound are written round-robin and read back (their segments' files closed
and reopened on the way), and refuses a creation it has no descriptors for, whole.

Scale: 2,000 partitions against a budget of 200 segment files in a 512-descriptor limit, the
ratio of the issue's goal (100,000 partitions, 10,000 files, 20,000 descriptors) at a fiftieth
of the size. Before the file cache, three descriptors per partition ran such a broker out of
descriptors at about 160 partitions."""

from __future__ import annotations

import os
import shutil

import pytest
from support.broker import BrokerProcess
from support.raw import RawConnection, fetch_from_start, fetched_values, nested

from odradek.protocol.records import Record, build_batch

pytestmark = [
    pytest.mark.interop,
    pytest.mark.skipif(shutil.which("prlimit") is None, reason="needs prlimit (util-linux)"),
]

TOPICS, PER_TOPIC = 4, 500
LIMIT, BUDGET = 512, 200


class LimitedBroker(BrokerProcess):
    """A broker started under ``prlimit --nofile=N:N`` (soft and hard)."""

    def __init__(self, tmpdir, overrides: dict, nofile: int) -> None:
        super().__init__(tmpdir, overrides)
        self.nofile = nofile

    def command(self) -> list[str]:
        return ["prlimit", f"--nofile={self.nofile}:{self.nofile}", *super().command()]


@pytest.fixture
def limited(tmp_path):
    started = []

    def make(nofile: int, **overrides) -> LimitedBroker:
        b = LimitedBroker(tmp_path / f"b{len(started)}", {k.replace("_", "."): v for k, v in overrides.items()}, nofile)
        started.append(b)
        b.start(timeout=60)
        return b

    yield make
    for b in started:
        b.stop()


def descriptors(pid: int) -> tuple[int, int]:
    """(all open descriptors, those on segment .log files) of process ``pid``."""
    total = logs = 0
    for name in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{name}")
        except OSError:
            continue
        total += 1
        logs += target.endswith(".log")
    return total, logs


def create(c: RawConnection, name: str, partitions: int, *, validate_only: bool = False):
    t = nested(
        19, 7, "CreatableTopic", name=name, num_partitions=partitions, replication_factor=1, assignments=(), configs=()
    )
    return c.call(19, 7, topics=(t,), timeout=60000, validate_only=validate_only).topics[0]


def produce_all(c: RawConnection, topic: str, partitions: int, value: bytes) -> list[int]:
    pds = tuple(
        nested(0, 9, "PartitionProduceData", index=p, records=build_batch([Record(value=value + b"%d" % p)]))
        for p in range(partitions)
    )
    td = nested(0, 9, "TopicProduceData", name=topic, partition_data=pds)
    r = c.call(0, 9, acks=-1, timeout=30000, topic_data=(td,))
    return [int(p.error_code) for p in r.responses[0].partition_responses]


def fetch(c: RawConnection, topic: str, partitions: range) -> dict[int, list[bytes]]:
    return fetched_values(c.call(1, 12, **fetch_from_start(topic, partitions)))


def test_descriptors_stay_under_the_bound_while_many_partitions_are_written_round_robin(limited):
    b = limited(LIMIT, log_open_segments_max=BUDGET)
    assert f"segment files kept open: at most {BUDGET}" in b.log_tail(200)
    pid = b.proc.pid
    peak_total = peak_logs = 0
    with RawConnection(b.bootstrap, timeout=60) as c:
        for t in range(TOPICS):
            r = create(c, f"t{t}", PER_TOPIC)
            assert int(r.error_code) == 0, r.error_message
            total, logs = descriptors(pid)
            peak_total, peak_logs = max(peak_total, total), max(peak_logs, logs)
        for rnd in range(2):  # every partition written, topic after topic, twice
            for t in range(TOPICS):
                assert produce_all(c, f"t{t}", PER_TOPIC, b"r%d-" % rnd) == [0] * PER_TOPIC
                total, logs = descriptors(pid)
                peak_total, peak_logs = max(peak_total, total), max(peak_logs, logs)
        for t in range(TOPICS):  # read back: most of these segments' files were closed meanwhile
            for lo in range(0, PER_TOPIC, 100):
                got = fetch(c, f"t{t}", range(lo, lo + 100))
                for p, values in got.items():
                    assert values == [b"r0-%d" % p, b"r1-%d" % p], (t, p)
                total, logs = descriptors(pid)
                peak_total, peak_logs = max(peak_total, total), max(peak_logs, logs)
    # the cache's files, and at most those of one Fetch's regions still being sent (100 partitions)
    assert peak_logs <= BUDGET + 100, peak_logs
    assert peak_total < LIMIT, peak_total
    assert TOPICS * PER_TOPIC > 3 * LIMIT  # three descriptors a partition would not have fitted
    assert b.proc.poll() is None and "Too many open files" not in b.log_tail(2000)


def test_creation_beyond_the_descriptor_budget_is_refused_whole(limited):
    # a budget larger than the limit allows: what the broker holds open is bounded by the limit
    b = limited(256, log_open_segments_max=1000)
    with RawConnection(b.bootstrap, timeout=60) as c:
        for validate_only in (True, False):
            r = create(c, "big", 400, validate_only=validate_only)
            assert int(r.error_code) == 44, r  # POLICY_VIOLATION, as Kafka refuses an operation over its bounds
            assert "file descriptors" in r.error_message and "log.open.segments.max" in r.error_message
        # nothing of it was written: not in the metadata, no directory on disk
        md = c.call(3, 12, topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False)
        assert "big" not in {t.name for t in md.topics}
        assert not [d for d in os.listdir(b.log_dirs) if d.startswith("big-")]
        # a creation that fits goes through, and the broker serves it
        assert int(create(c, "small", 20).error_code) == 0
        assert produce_all(c, "small", 20, b"v") == [0] * 20
        assert fetch(c, "small", range(20))[7] == [b"v7"]
    assert "refused to create partitions" in b.log_tail(400)
