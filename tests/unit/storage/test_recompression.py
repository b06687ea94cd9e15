"""Broker-side compression.type: the validator rewrites a producer's batch whose codec is not the
topic's (validator.py, protocol.records.recompress_batch), as a seam of its own and through a Log."""

import pytest
from support.batches import batch

from odradek.protocol import records as R
from odradek.protocol.records import Record, build_batch, build_control_batch, decode_records, iter_batches
from odradek.storage import LogConfig, StorageRecordTooLargeError
from odradek.storage.validator import BatchValidator

NOW = 1_700_000_000_000
TARGETS = {"uncompressed": R.NONE, "gzip": R.GZIP, "snappy": R.SNAPPY, "lz4": R.LZ4, "zstd": R.ZSTD}


def validator(**cfg) -> BatchValidator:
    return BatchValidator(LogConfig(**cfg), "t-0")


def written(plan) -> bytes:
    return b"".join(bytes(b) for b in plan.buffers)


def records(n=5, ts=NOW):
    return [Record(-1, ts + i, b"k%d" % i, b"value-%d " % i * 20, [("h", b"x"), ("n", None)]) for i in range(n)]


def stripped(recs):
    return [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in recs]


# ------------------------------------------------------------------ config


def test_target_compression_from_topic_configs():
    assert LogConfig().target_compression is None  # producer: keep the producer's codec
    assert LogConfig.from_props({"compression.type": "uncompressed"}).target_compression == (R.NONE, -1)
    assert LogConfig.from_props({"compression.type": "snappy"}).target_compression == (R.SNAPPY, -1)
    assert LogConfig.from_props({"compression.type": "gzip"}).target_compression == (R.GZIP, -1)
    assert LogConfig.from_props({"compression.type": "lz4"}).target_compression == (R.LZ4, 9)
    assert LogConfig.from_props({"compression.type": "zstd"}).target_compression == (R.ZSTD, 3)
    cfg = LogConfig.from_props(
        {"compression.type": "gzip", "compression.gzip.level": "9", "compression.zstd.level": "-7"}
    )
    assert cfg.target_compression == (R.GZIP, 9) and cfg.compression_zstd_level == -7
    for key, bad in [
        ("compression.type", "GZIP"),
        ("compression.type", "none"),
        ("compression.gzip.level", "0"),
        ("compression.gzip.level", "10"),
        ("compression.lz4.level", "0"),
        ("compression.lz4.level", "18"),
        ("compression.zstd.level", "23"),
        ("compression.zstd.level", "-131073"),
    ]:
        with pytest.raises(ValueError, match=key.replace(".", r"\.")):
            LogConfig.from_props({key: bad})


# ------------------------------------------------------------------ the rewrite of one batch


@pytest.mark.parametrize("source", list(TARGETS.values()))
@pytest.mark.parametrize("target", list(TARGETS.values()))
def test_recompress_batch_keeps_every_field_but_codec_length_and_crc(source, target):
    b = build_batch(
        records(),
        base_offset=40,
        compression=source,
        producer_id=9,
        producer_epoch=3,
        base_sequence=17,
        is_transactional=True,
        partition_leader_epoch=2,
    )
    out = R.recompress_batch(b, codec=target)
    (h,) = iter_batches(out)  # framing and CRC valid
    (old,) = iter_batches(b)
    assert h.compression == target
    assert h._replace(batch_length=0, crc=0, attributes=0) == old._replace(batch_length=0, crc=0, attributes=0)
    assert h.attributes & ~R.COMPRESSION_MASK == old.attributes & ~R.COMPRESSION_MASK
    assert decode_records(out) == decode_records(b)
    if source == target == R.NONE:
        assert bytes(out) == b


def test_recompress_batch_applies_the_level():
    b = build_batch(records(200))
    sizes = {
        (codec, level): len(R.recompress_batch(b, codec=codec, level=level))
        for codec, level in [(R.GZIP, 1), (R.GZIP, 9), (R.ZSTD, -50), (R.ZSTD, 19), (R.LZ4, 1), (R.LZ4, 17)]
    }
    assert sizes[(R.GZIP, 9)] < sizes[(R.GZIP, 1)]
    assert sizes[(R.ZSTD, 19)] < sizes[(R.ZSTD, -50)]
    assert sizes[(R.LZ4, 17)] < sizes[(R.LZ4, 1)]


def test_recompress_batch_of_corrupt_compressed_records_is_corrupt():
    b = bytearray(build_batch(records(), compression=R.GZIP))
    b[70:80] = b"\x00" * 10
    with pytest.raises(R.CorruptRecordError, match="cannot decompress gzip"):
        R.recompress_batch(b, codec=R.ZSTD)


# ------------------------------------------------------------------ the validator's write plan


@pytest.mark.parametrize("name", list(TARGETS))
@pytest.mark.parametrize("source", [R.NONE, R.GZIP, R.LZ4, R.ZSTD, R.SNAPPY])
def test_producer_batch_is_written_in_the_topic_codec(name, source):
    received = build_batch(records(), compression=source, producer_id=4, producer_epoch=0, base_sequence=0)
    checked = validator(compression_type=name).validate(received, NOW)
    plan = checked.assign_offsets(100, leader_epoch=7)
    out = written(plan)
    (h,) = iter_batches(out)
    assert h.compression == TARGETS[name]
    assert (h.base_offset, h.last_offset, h.partition_leader_epoch) == (100, 104, 7)
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (4, 0, 0)
    assert (plan.first_offset, plan.next_offset, plan.record_count, plan.size) == (100, 105, 5, len(out))
    assert plan.batches == [(0, 104, NOW + 4, len(out))]
    assert stripped(decode_records(out)) == [(100 + i, *x[1:]) for i, x in enumerate(stripped(records()))]
    if source == TARGETS[name]:  # the same codec: written as received (a 16-byte prefix, then the received bytes)
        assert len(plan.buffers) == 2 and plan.buffers[1].obj is received
    else:
        assert len(plan.buffers) == 1
    # the producer state reads the received headers: the fields it uses did not change
    assert checked.headers[0].base_sequence == h.base_sequence and checked.headers[0].record_count == h.record_count


def test_producer_mode_keeps_the_write_plan_of_received_bytes():
    received = batch(3, ts=NOW, compression=R.GZIP)
    checked = validator(compression_type="producer").validate(received, NOW)
    assert checked.target_compression is None
    plan = checked.assign_offsets(5, 1)
    assert len(plan.buffers) == 2 and plan.buffers[1].obj is received


def test_log_append_time_and_recompression():
    received = batch(2, ts=5, compression=R.SNAPPY)
    v = validator(message_timestamp_type="LogAppendTime", compression_type="zstd")
    plan = v.validate(received, NOW).assign_offsets(10, 3)
    out = written(plan)
    (h,) = iter_batches(out)
    assert (h.compression, h.base_offset, h.partition_leader_epoch, h.timestamp_type, h.max_timestamp) == (
        R.ZSTD,
        10,
        3,
        R.LOG_APPEND_TIME,
        NOW,
    )
    assert h.base_timestamp == 5  # the records keep their create times; readers take the log append time
    assert plan.batches == [(0, 11, NOW, len(out))]
    assert [r.timestamp for r in decode_records(out)] == [NOW, NOW]


def test_several_batches_each_rewritten_only_when_its_codec_differs():
    b1 = batch(2, ts=NOW, compression=R.GZIP)
    b2 = batch(3, ts=NOW + 10)
    b3 = batch(1, ts=NOW + 20, compression=R.LZ4)
    plan = validator(compression_type="gzip").validate(b1 + b2 + b3, NOW).assign_offsets(0, 0)
    out = written(plan)
    hs = list(iter_batches(out))
    assert [(h.base_offset, h.record_count, h.compression) for h in hs] == [(0, 2, 1), (2, 3, 1), (5, 1, 1)]
    assert [(rel, last, size) for rel, last, _, size in plan.batches] == [
        (h.position, h.last_offset, h.size) for h in hs
    ]
    assert [r.offset for h in hs for r in decode_records(out, h.position)] == list(range(6))
    assert out[16 : hs[0].size] == (b1 + b2 + b3)[16 : len(b1)]  # the gzip batch: as received


def test_uncompressed_control_batch_is_not_compressed():
    marker = build_control_batch(R.CONTROL_COMMIT, producer_id=3, producer_epoch=0, timestamp=NOW)
    plan = validator(compression_type="zstd").validate(marker, NOW).assign_offsets(8, 2)
    (h,) = iter_batches(written(plan))
    assert h.is_control and h.compression == R.NONE and h.base_offset == 8


def test_recompressed_size_checked_against_max_message_bytes():
    received = batch(50, ts=NOW, value=b"a" * 1000, compression=R.ZSTD)
    assert len(received) < 2000
    with pytest.raises(
        StorageRecordTooLargeError, match="after recompression with none exceeds max.message.bytes 2000"
    ):
        validator(compression_type="uncompressed", max_message_bytes=2000).validate(received, NOW).assign_offsets(0, 0)


def test_replicated_batches_keep_the_leader_bytes():
    received = build_batch(records(), base_offset=50, partition_leader_epoch=4)
    checked = validator(compression_type="gzip").validate(received, NOW, assign_offsets=False)
    assert checked.target_compression is None
    assert written(checked.keep_offsets(log_end_offset=50)) == received


# ------------------------------------------------------------------ through a Log


def test_log_stores_in_topic_codec_and_follows_config_changes(make_mgr, clock):
    m = make_mgr()
    lg = m.create_log("t", 0, LogConfig.from_props({"compression.type": "zstd"}))
    first = lg.append(batch(3, ts=clock.ms, compression=R.GZIP))
    lg.update_config(LogConfig.from_props({"compression.type": "lz4", "compression.lz4.level": "1"}))
    second = lg.append(batch(2, ts=clock.ms))
    lg.update_config(LogConfig())
    third = lg.append(batch(1, ts=clock.ms, compression=R.SNAPPY))
    stored = lg.read_bytes(0, 1 << 20, max_offset=third.last_offset + 1)
    assert [(h.base_offset, h.compression) for h in iter_batches(stored)] == [(0, R.ZSTD), (3, R.LZ4), (5, R.SNAPPY)]
    assert (first.first_offset, second.first_offset, third.first_offset) == (0, 3, 5)
    assert [r.offset for r in R.decode_any(stored)] == list(range(6))
    assert lg.log_end_offset == 6


def test_idempotent_retry_of_a_recompressed_batch_is_a_duplicate(make_mgr, clock):
    m = make_mgr()
    lg = m.create_log("t", 0, LogConfig.from_props({"compression.type": "gzip"}))
    b = batch(4, ts=clock.ms, producer_id=11, producer_epoch=0, base_sequence=0)
    info = lg.append(b)
    again = lg.append(b)
    assert again.duplicate and (again.first_offset, again.last_offset) == (info.first_offset, info.last_offset)
    nxt = lg.append(batch(1, ts=clock.ms, producer_id=11, producer_epoch=0, base_sequence=4))
    assert nxt.first_offset == 4 and lg.log_end_offset == 5
