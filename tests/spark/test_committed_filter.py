"""The read_committed filter of the Spark reader (spark/committed.py) on hand-built fetch bytes:
which batches a read_committed consumer keeps, given the Fetch response's aborted transactions
(no Spark, no broker)."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from odradek.protocol import records as R  # noqa: E402
from odradek.spark.committed import committed_runs, decode_committed  # noqa: E402

ABORT, COMMIT = 0, 1


class Log:
    """A partition's bytes as a Fetch would return them, built batch by batch."""

    def __init__(self) -> None:
        self.buf = bytearray()
        self.next = 0

    def data(self, pid: int, n: int, tag: str, txn: bool = True, codec: int = R.NONE) -> None:
        recs = [R.Record(self.next + i, 1_700_000_000_000, None, f"{tag}{i}".encode()) for i in range(n)]
        self.buf += R.build_batch(
            recs,
            base_offset=self.next,
            producer_id=pid,
            producer_epoch=0,
            base_sequence=0,
            is_transactional=txn,
            compression=codec,
        )
        self.next += n

    def marker(self, pid: int, kind: int) -> None:
        self.buf += R.build_control_batch(kind, producer_id=pid, producer_epoch=0, timestamp=0, base_offset=self.next)
        self.next += 1


def values(data, aborted, start=0, columnar=True) -> list[bytes]:
    items, _nxt = decode_committed("t", 0, bytes(data), aborted, start, columnar)
    if columnar:
        out = []
        for cols in items:
            import pyarrow as pa

            from odradek.spark.reader import columns_to_arrow

            out.extend(pa.Table.from_batches([columns_to_arrow(cols, cols.count)]).column("value").to_pylist())
        return out
    return [r.value for rs in items for r in rs]


@pytest.mark.parametrize("columnar", [True, False], ids=["columns", "records"])
def test_interleaved_transactions_keep_only_committed(columnar):
    g = Log()
    g.data(1, 2, "a")  # 0-1   pid 1, aborted
    g.data(2, 2, "b")  # 2-3   pid 2, committed
    g.data(9, 1, "plain", txn=False)  # 4 non-transactional
    g.data(1, 1, "a")  # 5     pid 1, aborted (same transaction)
    g.marker(1, ABORT)  # 6
    g.data(1, 2, "c")  # 7-8   pid 1 again: a new transaction, committed
    g.marker(2, COMMIT)  # 9
    g.marker(1, COMMIT)  # 10
    g.data(3, 1, "d", codec=R.LZ4)  # 11 pid 3, aborted, compressed
    g.marker(3, ABORT)  # 12
    aborted = [(3, 11), (1, 0)]  # the broker's order is by first offset; ours must not matter
    got = values(g.buf, aborted, columnar=columnar)
    assert got == [b"b0", b"b1", b"plain0", b"c0", b"c1"]
    _runs, nxt = committed_runs(bytes(g.buf), aborted)
    assert nxt == 13


def test_no_aborted_list_keeps_everything_but_markers():
    g = Log()
    g.data(1, 2, "a")
    g.marker(1, ABORT)
    g.data(2, 1, "b")
    runs, nxt = committed_runs(bytes(g.buf), None)
    assert runs == [(0, len(g.buf))]
    assert nxt == 4
    assert values(g.buf, None) == [b"a0", b"a1", b"b0"]  # read_uncommitted: markers never show


def test_transaction_begun_before_the_fetch_offset_is_still_dropped():
    """A fetch from the middle of an aborted transaction: its first offset is below the fetch
    offset, so the producer is aborted from the first batch on."""
    g = Log()
    g.data(1, 3, "a")  # 0-2
    g.data(1, 2, "a")  # 3-4
    g.data(2, 1, "b")  # 5
    g.marker(1, ABORT)  # 6
    g.marker(2, COMMIT)  # 7
    assert values(g.buf, [(1, 0)], start=4) == [b"b0"]


def test_an_abort_marker_of_a_producer_not_listed_changes_nothing():
    g = Log()
    g.data(1, 1, "a")
    g.marker(1, ABORT)  # listed nowhere (the broker names only aborted transactions it overlaps)
    g.data(1, 1, "b")
    assert values(g.buf, []) == [b"a0", b"b0"]


def test_truncated_last_batch_stays_for_the_next_fetch():
    g = Log()
    g.data(1, 2, "a")
    g.marker(1, ABORT)
    g.data(2, 2, "b")
    whole = len(g.buf)
    g.data(2, 3, "c")
    cut = bytes(g.buf[: whole + 20])
    got, nxt = decode_committed("t", 0, cut, [(1, 0)], 0, False)
    assert [r.value for rs in got for r in rs] == [b"b0", b"b1"]
    assert nxt == 5  # the truncated batch is fetched again from there
