"""`__transaction_state` in Kafka's format, checked against Kafka 4 both ways:

* Kafka's DumpLogSegments with `--transaction-log-decoder` reads the segments odradek's
  coordinator wrote (key, producer id and epoch, state, partitions, timeout) as odradek holds
  them;
* odradek's decoder reads what Kafka 4.4's own coordinator wrote for the same workload (a
  commit and an abort over two partitions), the states in the same order.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from support.apache_kafka import SHORT_JVM, tool_command, unavailable_reason

from odradek.coordinator.txn.records import decode_key, decode_value, partition_for
from odradek.protocol.records import decode_records, iter_batches

pytestmark = pytest.mark.reference

TXN_ID = "format-tx"
PARTITIONS = 50  # both brokers' default transaction.state.log.num.partitions


def workload(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("fmt", 2, 1)])["fmt"].result(30)
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": TXN_ID, "linger.ms": 0})
    p.init_transactions(60)
    for commit in (True, False):
        p.begin_transaction()
        p.produce("fmt", b"v", partition=0)
        p.produce("fmt", b"v", partition=1)
        p.flush(30)
        (p.commit_transaction if commit else p.abort_transaction)(30)


def records_of(segment_dir: Path) -> list[tuple[str, object]]:
    out = []
    for seg in sorted(segment_dir.glob("*.log")):
        data = seg.read_bytes()
        for h in iter_batches(data):
            if h.is_control:
                continue
            for rec in decode_records(data, h.position):
                out.append((decode_key(rec.key), decode_value(rec.value)))
    return out


def wait_for_states(segment_dir: Path, n: int, timeout: float = 20) -> list:
    deadline = time.monotonic() + timeout
    while True:
        recs = [v for k, v in records_of(segment_dir) if k == TXN_ID]
        if len(recs) >= n or time.monotonic() > deadline:
            return recs
        time.sleep(0.2)


EXPECTED_STATES = [
    0,
    1,
    2,
    4,
    1,
    3,
    5,
]  # Empty, Ongoing, PrepareCommit, CompleteCommit, Ongoing, PrepareAbort, CompleteAbort


def test_kafka_dump_log_reads_odradeks_transaction_log(broker):
    if unavailable_reason("4"):
        pytest.skip(unavailable_reason("4"))
    workload(broker.bootstrap)
    seg_dir = broker.log_dirs / f"__transaction_state-{partition_for(TXN_ID, PARTITIONS)}"
    ours = wait_for_states(seg_dir, len(EXPECTED_STATES))
    assert [v.state for v in ours] == EXPECTED_STATES
    cmd = tool_command(
        "4",
        "DumpLogSegments",
        "--files",
        str(sorted(seg_dir.glob("*.log"))[0]),
        "--transaction-log-decoder",
        "--print-data-log",
        jvm=SHORT_JVM,
    )
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    assert p.returncode == 0 and "Exception" not in p.stderr, p.stdout[-2000:] + p.stderr[-2000:]
    decoded = [
        (json.loads(m[1]), json.loads(m[2]))
        for m in re.finditer(r"key: (\{.*\}) payload: (\{.*\})$", p.stdout, re.MULTILINE)
    ]
    names = ["Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort"]
    expected = []
    for v in ours:
        by_topic: dict[str, list[int]] = {}
        for t, part in v.partitions:
            by_topic.setdefault(t, []).append(part)
        expected.append(
            (
                {"type": "0", "data": {"transactionalId": TXN_ID}},
                {
                    "version": "0",
                    "data": {
                        "producerId": v.producer_id,
                        "producerEpoch": v.producer_epoch,
                        "transactionTimeoutMs": v.timeout_ms,
                        "transactionStatus": names[v.state],
                        "transactionPartitions": None
                        if v.state == 0
                        else [{"topic": t, "partitionIds": ps} for t, ps in by_topic.items()],
                        "transactionLastUpdateTimestampMs": v.last_update_ms,
                        "transactionStartTimestampMs": v.start_ms,
                    },
                },
            )
        )
    assert decoded == expected, p.stdout[-3000:]


def test_odradek_reads_kafkas_transaction_log(kafka4):
    workload(kafka4.bootstrap)
    seg_dir = kafka4.nodes[0].data_dir / f"__transaction_state-{partition_for(TXN_ID, PARTITIONS)}"
    theirs = wait_for_states(seg_dir, len(EXPECTED_STATES))
    assert [v.state for v in theirs] == EXPECTED_STATES, theirs
    ongoing = [v for v in theirs if v.state == 1]
    assert all(v.partitions == (("fmt", 0), ("fmt", 1)) for v in ongoing)
    assert len({v.producer_id for v in theirs if v.state != 0}) >= 1
