"""The leader's fast path for followers' Fetch requests (broker/follower_fetch.py) in the
simulator: the followers' Fetch requests are served there (not by the generic handler) through
leader kills, a pause past the session, a network partition, connection resets and a
reassignment, and the run holds every guarantee the checker knows (acknowledged records kept,
replicas agreeing, no high watermark going back)."""

from __future__ import annotations

import collections
import struct

import pytest

from odradek.broker import follower_fetch
from odradek.protocol.fetch_codec import decode_replica_fetch_request
from odradek.testing.sim.faults import busy_schedule
from odradek.testing.sim.profiles import PROFILES
from odradek.testing.sim.run import run_seed

BUSY = busy_schedule()  # faults that reorder much


@pytest.mark.parametrize("seed", [11, 12])
def test_followers_fetch_on_the_fast_path_through_faults(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: collections.Counter[str] = collections.Counter()
    accept = follower_fetch.accept

    def counting(conn, frame):  # noqa: ANN001, ANN202
        taken = accept(conn, frame)
        if struct.unpack_from(">h", frame)[0] == 1:
            req = decode_replica_fetch_request(frame)
            if req is None or req.replica_id >= 0:  # (a consumer's: not this path's)
                seen["fast" if taken is not None else "generic"] += 1
        return taken

    monkeypatch.setattr(follower_fetch, "accept", counting)
    result = run_seed(seed, PROFILES["ci"], faults=BUSY)
    assert result.ok, result.anomalies
    assert result.stats["acked"] > 50 and result.stats["applied"] == {f.kind: 1 for f in BUSY}
    # sessions opened anew after each fault go the generic way; every other one the fast way
    assert seen["fast"] > 200 and seen["generic"] < seen["fast"] / 5, seen
