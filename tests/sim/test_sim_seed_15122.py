"""Seed 15122 of the long run (issue 25): `reordered`, faults failover (p0's leader, from 1 s for
15 s), power (b2, 3.52 s), zk-cut (b2, 10.69 s), pause (b1, 11.33 s).

What happened (`python -m odradek.testing.sim --seed 15122`, on fadc9db): producer-1's batches to
p0 with sequences 0-8 were in requests to b2 when it lost power; b3 became p0's leader, and the
producer sent its next batch (sequence 9, record producer-1:34) there at 6.84 s while those
requests were still unanswered. b3 had no state for the producer and took sequence 9, as Kafka's
ProducerAppendInfo does for a producer it does not know; the retries of sequences 0-8 were then
refused OUT_OF_ORDER_SEQUENCE_NUMBER behind it until they expired, and record producer-1:27, sent
before 34, was written after it. The fix is in odradek's producer (client/producer/sequences.py
`sendable`): a new batch goes only to the broker its partition's outstanding batches are in a
request to. Unit test: tests/unit/client/producer/test_producer_retry_order.py.
"""

from __future__ import annotations

from odradek.testing.sim.profiles import PROFILES
from odradek.testing.sim.run import run_seed


def test_seed_15122_a_new_batch_does_not_overtake_batches_in_a_request_to_a_leader_that_lost_power():
    r = run_seed(15122, PROFILES["ci"])
    assert [f.kind for f in r.schedule] == ["failover", "power", "zk-cut", "pause"]  # the seed's faults, as found
    assert r.ok, r.report()
