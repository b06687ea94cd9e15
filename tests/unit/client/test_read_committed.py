"""The consumer's read_committed filter on hand-built logs (both record codecs, `impl`):
Kafka's algorithm over the Fetch response's aborted transactions, markers never returned.
The same behaviour against a real broker: tests/interop/txn/test_odradek_client.py."""

from __future__ import annotations

import pytest

from odradek.client import _records as CR
from odradek.protocol import records as R


def batch(offset: int, values: list[bytes], pid: int = -1, txn: bool = False, codec: int = R.NONE) -> bytes:
    recs = [R.Record(offset + i, 1000 + i, None, v) for i, v in enumerate(values)]
    return R.build_batch(
        recs,
        base_offset=offset,
        producer_id=pid,
        producer_epoch=0 if pid >= 0 else -1,
        base_sequence=0 if pid >= 0 else -1,
        is_transactional=txn,
        compression=codec,
    )


def marker(offset: int, pid: int, commit: bool) -> bytes:
    return R.build_control_batch(
        R.CONTROL_COMMIT if commit else R.CONTROL_ABORT,
        producer_id=pid,
        producer_epoch=0,
        timestamp=2000,
        base_offset=offset,
    )


def log_of_two_producers() -> tuple[bytes, list[tuple[int, int]]]:
    """pid 7 aborts [0, 1] and commits [4]; pid 8 commits [2] interleaved; plain record at 6;
    pid 7 aborts again [7] (its second transaction starts at 7); a COMMIT of pid 8 at 9."""
    parts = [
        batch(0, [b"a0", b"a1"], pid=7, txn=True),  # 0-1 aborted
        batch(2, [b"c2"], pid=8, txn=True),  # 2 committed
        marker(3, 7, commit=False),  # 3 ABORT pid 7
        batch(4, [b"c4"], pid=7, txn=True),  # 4 committed
        marker(5, 7, commit=True),  # 5 COMMIT pid 7
        batch(6, [b"p6"]),  # 6 not transactional
        batch(7, [b"a7"], pid=7, txn=True, codec=R.GZIP),  # 7 aborted
        marker(8, 7, commit=False),  # 8 ABORT pid 7
        marker(9, 8, commit=True),  # 9 COMMIT pid 8
    ]
    return b"".join(parts), [(7, 0), (7, 7)]


def values(recs) -> list[bytes]:
    return [r.value for r in recs]


def test_aborted_batches_follow_kafkas_algorithm():
    data, aborted = log_of_two_producers()
    assert CR.aborted_batches(data, aborted) == {0, 7}
    # the broker names only what overlaps the fetched range, unordered: the same answer
    assert CR.aborted_batches(data, list(reversed(aborted))) == {0, 7}
    assert CR.aborted_batches(data, []) == set()


def test_read_committed_returns_exactly_the_committed_records(impl):
    data, aborted = log_of_two_producers()
    recs, nxt = CR.decode_fetched("t", 0, data, 0, aborted=CR.aborted_batches(data, aborted))
    assert values(recs) == [b"c2", b"c4", b"p6"]
    assert [r.offset for r in recs] == [2, 4, 6]
    assert nxt == 10  # past the last marker


def test_read_uncommitted_returns_all_data_and_no_markers(impl):
    data, _ = log_of_two_producers()
    recs, nxt = CR.decode_fetched("t", 0, data, 0)
    assert values(recs) == [b"a0", b"a1", b"c2", b"c4", b"p6", b"a7"]
    assert nxt == 10


def test_columns_filter_the_same(impl):
    data, aborted = log_of_two_producers()
    cols, nxt = CR.decode_fetched_columns("t", 0, data, 0, aborted=CR.aborted_batches(data, aborted))
    assert list(cols.offset_list()) == [2, 4, 6]
    assert nxt == 10


def test_a_fetch_from_inside_an_aborted_transaction_still_skips_it(impl):
    """The fetch starts after the transaction's first offset: the broker still names it (its
    first offset is below the fetch offset), and the batch reached is skipped."""
    data, aborted = log_of_two_producers()
    tail = data[data.index(batch(6, [b"p6"])) :]
    recs, nxt = CR.decode_fetched("t", 0, tail, 6, aborted=CR.aborted_batches(tail, [(7, 7)]))
    assert values(recs) == [b"p6"]
    assert nxt == 10


@pytest.mark.parametrize("commit", [True, False])
def test_only_an_abort_marker_ends_the_skipping(commit):
    """As Kafka's consumer: a producer named aborted stays skipped until an ABORT marker of its
    own (a COMMIT marker does not end it); after the ABORT its next transaction is read."""
    data = b"".join([batch(0, [b"x"], pid=7, txn=True), marker(1, 7, commit), batch(2, [b"y"], pid=7, txn=True)])
    assert CR.aborted_batches(data, [(7, 0)]) == ({0, 2} if commit else {0})


# --------------------------------------------------------------------------- a property: random interleavings

try:
    from hypothesis import given
    from hypothesis import strategies as st
except ImportError:  # the test extra not installed
    given = None

if given is not None:
    OPS = st.lists(
        st.tuples(st.sampled_from(["data", "data", "commit", "abort", "plain"]), st.integers(0, 2)), max_size=40
    )

    def build_log(ops, end_open_with_abort: bool):
        """A partition's log as a broker would write it for these operations (transactions of
        up to three producers interleaved, plain records between): the bytes, the aborted
        transactions (producer id, first offset, marker offset) and each data record's fate."""
        parts, aborted, fate = [], [], {}  # fate: offset -> (value, visible under read_committed)
        open_txn: dict[int, tuple[int, list[int]]] = {}  # pid -> (first offset, data offsets)
        off = 0

        def end(pid, commit):
            nonlocal off
            first, offsets = open_txn.pop(pid)
            parts.append(marker(off, pid, commit))
            if not commit:
                aborted.append((pid, first, off))
            for o in offsets:
                fate[o] = (fate[o][0], commit)
            off += 1

        for action, pid in ops:
            if action == "plain":
                parts.append(batch(off, [b"p%d" % off]))
                fate[off] = (b"p%d" % off, True)
                off += 1
            elif action == "data":
                parts.append(batch(off, [b"t%d" % off], pid=pid, txn=True))
                open_txn.setdefault(pid, (off, []))[1].append(off)
                fate[off] = (b"t%d" % off, None)
                off += 1
            elif pid in open_txn:
                end(pid, action == "commit")
        for pid in sorted(open_txn):
            end(pid, not end_open_with_abort)
        return b"".join(parts), aborted, fate, off

    @given(ops=OPS, end_open_with_abort=st.booleans(), start_frac=st.floats(0, 1))
    def test_read_committed_matches_a_model_of_the_log(ops, end_open_with_abort, start_frac):
        data, aborted, fate, end_offset = build_log(ops, end_open_with_abort)
        start = int(start_frac * end_offset)
        # what the broker names for a fetch from `start`: the aborted transactions that overlap it
        named = [(pid, first) for pid, first, last in aborted if last >= start]
        for impl in CR.IMPLEMENTATIONS:
            CR.set_implementation(impl)
            try:
                got, nxt = CR.decode_fetched("t", 0, data, start, aborted=CR.aborted_batches(data, named))
                everything, _ = CR.decode_fetched("t", 0, data, start)
            finally:
                CR.set_implementation(CR.IMPLEMENTATIONS[0])
            assert [(r.offset, r.value) for r in got] == [
                (o, v) for o, (v, visible) in sorted(fate.items()) if o >= start and visible
            ]
            assert [r.offset for r in everything] == [o for o in sorted(fate) if o >= start]
            assert nxt == max(end_offset, start)
