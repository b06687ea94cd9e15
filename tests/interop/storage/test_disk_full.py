"""A full disk takes its log directory offline; the broker keeps serving the rest and
loses nothing it acknowledged. Uses a small tmpfs (needs root to mount; skipped otherwise)."""

from __future__ import annotations

import os
import subprocess

import pytest
from support.raw import RawConnection, nested

from odradek.protocol.records import Record, build_batch, decode_records, iter_batches

pytestmark = pytest.mark.interop


@pytest.fixture
def small_disk(tmp_path):
    mnt = tmp_path / "small"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def _produce(c, topic, partition, value):
    pd = nested(0, 9, "PartitionProduceData", index=partition, records=build_batch([Record(value=value)]))
    td = nested(0, 9, "TopicProduceData", name=topic, partition_data=(pd,))
    return c.call(0, 9, acks=-1, timeout=10000, topic_data=(td,)).responses[0].partition_responses[0]


def _read(c, topic, partition):
    fp = nested(
        1,
        12,
        "FetchPartition",
        partition=partition,
        current_leader_epoch=-1,
        fetch_offset=0,
        last_fetched_epoch=-1,
        log_start_offset=-1,
        partition_max_bytes=64 << 20,
    )
    ft = nested(1, 12, "FetchTopic", topic=topic, partitions=(fp,))
    r = c.call(
        1,
        12,
        replica_id=-1,
        max_wait=0,
        min_bytes=1,
        max_bytes=64 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=(ft,),
        forgotten_topics_data=(),
        rack_id="",
    )
    p = r.responses[0].partitions[0]
    data = p.records or b""
    return int(p.error_code), [rec.value for h in iter_batches(data) for rec in decode_records(data, h.position)]


def test_full_disk_takes_only_its_directory_offline(broker_factory, tmp_path, small_disk):
    big = tmp_path / "big"
    b = broker_factory(
        overrides={
            "log.dirs": f"{big},{small_disk}",
            "log.index.size.max.bytes": "65536",
            "log.flush.interval.messages": "1",
        }
    )
    with RawConnection(b.bootstrap) as c:
        topic = nested(
            19, 7, "CreatableTopic", name="fill", num_partitions=2, replication_factor=1, assignments=(), configs=()
        )
        assert int(c.call(19, 7, topics=(topic,), timeout=10000, validate_only=False).topics[0].error_code) == 0
        on_small = [p for p in (0, 1) if os.path.isdir(small_disk / f"fill-{p}")]
        assert len(on_small) == 1, "one partition per directory"
        full, healthy = on_small[0], 1 - on_small[0]
        acked = []
        value = os.urandom(64 * 1024)
        for i in range(200):  # 12.5 MiB: far more than 3 MiB
            r = _produce(c, "fill", full, value + bytes([i]))
            if int(r.error_code):
                assert int(r.error_code) == 56, r  # KAFKA_STORAGE_ERROR
                break
            acked.append(value + bytes([i]))
        else:
            pytest.fail("the small disk never filled up")
        assert acked, "nothing fitted before the disk was full"
        # That directory is offline now; the other one keeps serving, on the same connection.
        assert int(_produce(c, "fill", full, b"more").error_code) == 56
        assert int(_produce(c, "fill", healthy, b"fine").error_code) == 0
        assert _read(c, "fill", healthy) == (0, [b"fine"])
        assert _read(c, "fill", full)[0] == 56
    assert "offline" in b.log_tail(400).lower()
    # Room again (bigger tmpfs), restart: every acknowledged record is there.
    assert b.stop() == 0
    subprocess.run(["mount", "-o", "remount,size=64m", str(small_disk)], check=True)
    b.start()
    with RawConnection(b.bootstrap) as c:
        code, values = _read(c, "fill", full)
        assert code == 0
        assert values[: len(acked)] == acked
