"""Record batches for the storage tests (a module, not a conftest: `from conftest import ...`
resolves to whichever conftest pytest imported first when several test directories run together)."""

from __future__ import annotations

from odradek.protocol.records import Record, build_batch


def batch(n=1, *, ts=None, key=None, value=b"v" * 10, size=None, **kw) -> bytes:
    """A batch of n records; ``size`` pads values so the batch is about that many bytes."""
    if size is not None:
        value = b"x" * max(1, (size - 61) // n - 12)
    recs = [
        Record(-1, (ts if ts is not None else 1_700_000_000_000) + i, key if key is not None else None, value)
        for i in range(n)
    ]
    return build_batch(recs, **kw)
