"""A record larger than max.request.size is refused by the producer before it is batched."""

from __future__ import annotations

import pytest

from odradek.client import errors as E
from odradek.client.producer.core import ProducerCore


def test_a_record_over_max_request_size_raises_record_too_large():
    core = ProducerCore({"bootstrap.servers": "127.0.0.1:1", "max.request.size": 1000}, {})
    with pytest.raises(E.RecordTooLargeClientError, match="exceeds max.request.size 1000"):
        core.prepare("t", b"x" * 2000, None, None, 0, None, ([0], [0]))
    placed = core.prepare("t", b"x" * 100, None, None, 0, None, ([0], [0]))
    assert placed[0] == 0 and placed[3] == b"x" * 100
