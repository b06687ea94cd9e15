"""Hypothesis strategies for Fetch response partitions (the encoder's and decoder's tests)."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from odradek.protocol.fetch_codec import PartitionResult


def partition_results(records: Any, **more: Any) -> Any:
    """PartitionResults with every field drawn, the record pieces from `records`; `more`
    draws further fields (e.g. diverging_epoch)."""
    return st.builds(
        PartitionResult,
        partition=st.integers(0, 2**31 - 1),
        error_code=st.sampled_from([0, 1, 6, 74]),
        high_watermark=st.integers(-1, 2**62),
        last_stable_offset=st.integers(-1, 2**62),
        log_start_offset=st.integers(-1, 2**62),
        aborted=st.none() | st.lists(st.tuples(st.integers(-1, 2**62), st.integers(0, 2**62)), max_size=3),
        preferred_read_replica=st.integers(-1, 5),
        records=records,
        current_leader=st.none() | st.tuples(st.integers(0, 9), st.integers(0, 99)),
        **more,
    )
