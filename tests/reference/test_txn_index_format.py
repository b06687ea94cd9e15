"""odradek's ``.txnindex`` files and transaction markers are Kafka's: Kafka's own DumpLogSegments
(3.9 and 4.x) reads them.

A log written by odradek's storage: transactions of three producers, aborted and committed,
across several segments, one abort whose data is in an earlier segment than its marker, and a
compacted copy cleaned once (the cleaner keeps the abort's marker and its entry, the aborted
records go). DumpLogSegments prints each ``.txnindex`` entry (version, producer id, first
offset, last offset, last stable offset) exactly as odradek's index holds it, and each marker
as ``endTxnMarker: ABORT|COMMIT coordinatorEpoch: N`` in a valid batch."""

from __future__ import annotations

import re
import subprocess
import time

import pytest
from support.apache_kafka import SHORT_JVM, tool_command, unavailable_reason
from support.batches import batch

from odradek.protocol.records import CONTROL_ABORT, CONTROL_COMMIT, Record, build_batch, build_control_batch
from odradek.storage import AppendOrigin, LogConfig, LogManager

pytestmark = pytest.mark.reference

_ENTRY = re.compile(r"^version: (\d+) producerId: (\d+) firstOffset: (\d+) lastOffset: (\d+) lastStableOffset: (\d+)$")
_MARKER = re.compile(r"^\| offset: (\d+) .* endTxnMarker: (ABORT|COMMIT) coordinatorEpoch: (\d+)$")
_BATCH = re.compile(r"^baseOffset: (\d+) lastOffset: (\d+) .* isvalid: (\w+)")


def dump(line: str, files: list[str]) -> str:
    p = subprocess.run(
        tool_command(
            line,
            "DumpLogSegments",
            "--deep-iteration",
            "--print-data-log",
            "--files",
            ",".join(files),
            jvm=SHORT_JVM,
        ),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert p.returncode == 0, f"DumpLogSegments exited {p.returncode}:\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    assert "Exception" not in p.stderr, p.stderr[-3000:]
    return p.stdout


def write_log(directory: str, config: LogConfig):
    """The transactions, as the leader's log takes them; returns the manager and the log."""
    now = int(time.time() * 1000)
    m = LogManager([directory], LogConfig())
    m.load()
    lg = m.create_log("tx", 0, config)

    def data(pid, seq, n, key=b"k"):
        recs = [Record(-1, now, key + b"%d" % (seq + i), b"value") for i in range(n)]
        return build_batch(recs, producer_id=pid, producer_epoch=0, base_sequence=seq, is_transactional=True)

    def end(pid, commit, coordinator_epoch):
        b = build_control_batch(
            CONTROL_COMMIT if commit else CONTROL_ABORT,
            producer_id=pid,
            producer_epoch=0,
            timestamp=now,
            coordinator_epoch=coordinator_epoch,
        )
        lg.append(b, origin=AppendOrigin.COORDINATOR)

    lg.append(data(1, 0, 3))  # 0-2
    lg.append(data(2, 0, 2, b"j"))  # 3-4
    lg.roll()
    lg.append(batch(1, ts=now, key=b"plain"))  # 5
    end(1, False, 4)  # 6: abort 1 (data in the previous segment); lso 3 (producer 2 open)
    lg.append(data(3, 0, 1, b"i"))  # 7
    end(2, True, 4)  # 8
    lg.roll()
    end(3, False, 5)  # 9: lso 10
    lg.append(data(1, 3, 2))  # 10-11
    end(1, False, 5)  # 12: lso 13
    lg.roll()
    lg.append(batch(1, ts=now, key=b"tail"))  # 13
    lg.high_watermark = lg.log_end_offset
    return m, lg


def parse(out: str) -> tuple[list[tuple[int, ...]], list[tuple[int, str, int]]]:
    entries, markers = [], []
    for ln in out.splitlines():
        if m := _ENTRY.match(ln):
            entries.append(tuple(int(x) for x in m.groups()))
        elif m := _MARKER.match(ln):
            markers.append((int(m[1]), m[2], int(m[3])))
        elif m := _BATCH.match(ln):
            assert m[3] == "true", ln
    return entries, markers


@pytest.mark.parametrize("line", ["3.9", "4"])
def test_dump_log_segments_reads_odradeks_txnindex_and_markers(tmp_path, line):
    reason = unavailable_reason(line)
    if reason:
        pytest.skip(reason)
    m, lg = write_log(str(tmp_path / "data"), LogConfig())
    segs = [(s.log_path, s.txn_index.path, list(s.txn_index.entries)) for s in lg.segments]
    m.shutdown()
    index_files = [idx for _log, idx, entries in segs if entries]
    assert len(index_files) == 2  # segment 5 (one abort), segment 9 (two)
    out = dump(line, index_files + [log for log, _idx, _e in segs])
    entries, markers = parse(out)
    expected = [(0, e.producer_id, e.first_offset, e.last_offset, e.last_stable_offset) for *_x, es in segs for e in es]
    assert entries == expected
    assert entries == [(0, 1, 0, 6, 3), (0, 3, 7, 9, 10), (0, 1, 10, 12, 13)]
    assert markers == [(6, "ABORT", 4), (8, "COMMIT", 4), (9, "ABORT", 5), (12, "ABORT", 5)]


@pytest.mark.parametrize("line", ["4"])
def test_dump_log_segments_reads_a_cleaned_txnindex(tmp_path, line):
    reason = unavailable_reason(line)
    if reason:
        pytest.skip(reason)
    cfg = LogConfig(cleanup_policy="compact", min_cleanable_dirty_ratio=0.01, file_delete_delay_ms=0)
    m, lg = write_log(str(tmp_path / "data"), cfg)
    assert m.clean_once(force=True) == 1
    segs = [(s.log_path, s.txn_index.path, list(s.txn_index.entries)) for s in lg.segments]
    m.shutdown()
    out = dump(line, [idx for _log, idx, es in segs if es] + [log for log, _idx, _e in segs])
    entries, markers = parse(out)
    # the aborted data is gone, its markers and entries stay (this pass saw the data)
    assert entries == [(0, 1, 0, 6, 3), (0, 3, 7, 9, 10), (0, 1, 10, 12, 13)]
    assert markers == [(6, "ABORT", 4), (8, "COMMIT", 4), (9, "ABORT", 5), (12, "ABORT", 5)]
    keys = re.findall(r"key: (\S+) payload", out)
    assert keys == ["j0", "j1", "plain", "tail"]
