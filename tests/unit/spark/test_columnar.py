"""The columnar read path: RecordColumns -> Arrow equals the per-record path (no Spark needed)."""

from __future__ import annotations

import pytest

pa = pytest.importorskip("pyarrow")
pytest.importorskip("pyspark")

from odradek.client import _records as CR  # noqa: E402
from odradek.protocol import records as R  # noqa: E402
from odradek.spark.reader import columns_to_arrow, records_to_arrow  # noqa: E402


def fetched(recs, base_offset=0):
    b = CR.BatchBuilder(10**9)
    for i, (k, v) in enumerate(recs):
        assert b.append(1_700_000_000_000 + i, k, v, None)
    buf = bytearray(b.build(compression=R.LZ4))
    R.patch_batch(buf, base_offset=base_offset)
    return bytes(buf)


@pytest.mark.parametrize("cut", [1, 3, 5])
def test_columns_match_records(impl, cut):
    recs = [(b"k0", b"v0"), (None, b"v1"), (b"k2", None), (b"", b""), (b"k4", b"x" * 1000)]
    data = fetched(recs, base_offset=40)
    cols, nxt = CR.decode_fetched_columns("topic", 2, data, 40)
    rows, nxt2 = CR.decode_fetched("topic", 2, data, 40)
    assert nxt == nxt2 == 45
    got = columns_to_arrow(cols, cut)
    want = records_to_arrow(rows[:cut], False)
    assert got.schema == want.schema
    assert got.to_pylist() == want.to_pylist()
