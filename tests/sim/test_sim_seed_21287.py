"""Seed 21287 of the long run (issue 25): `reordered`, faults failover (p2's leader b3, from 1.05 s
for 17.3 s), power (b1, 8.71 s, while the only member of p2's ISR), bounce (b2, 8.72 s), drift.

What happened (`python -m odradek.testing.sim --seed 21287`, on 71ba285): producer-1's batches to
p2 with sequences 1, 2-21 and 22 (record producer-1:73) were in requests to b1 waiting for a
connection to it (b1 had lost power). At 13.82 s that connection attempt timed out. The request
that had opened it, for another partition, was told first and freed a request slot; the sender
drained p2's next batch (sequence 23, records 75-88) before the requests of sequences 1-22 were
told, and that request opened a new connection, which b1 accepted once back (15.2 s). b1 had lost
its log of p2 and with it the producer's state (beyond Kafka's guarantee: guarantee.py), took
sequence 23 as Kafka's ProducerAppendInfo takes any sequence from a producer it does not know, and
refused sequences 1-22 OUT_OF_ORDER_SEQUENCE_NUMBER behind it until they expired; after two epoch
bumps record 73 was written at offset 17, after 75-88 at offsets 9-13.

Not the power cut's doing: odradek's producer keeps order there (its rules are stricter than
Java's, client/producer/sequences.py), since a new batch is pipelined only behind requests on
one connection; the requests waiting for a connection broke that rule. Fixed in the producer: a
new batch goes only behind requests written on the broker's open connection, and on that
connection (`Sequences.sendable`, `Sender._send`). Unit tests:
tests/unit/client/producer/test_producer_retry_order.py.
"""

from __future__ import annotations

from odradek.testing.sim.profiles import PROFILES
from odradek.testing.sim.run import run_seed


def test_seed_21287_a_new_batch_does_not_overtake_batches_whose_requests_wait_for_a_connection():
    r = run_seed(21287, PROFILES["ci"])
    assert [f.kind for f in r.schedule] == ["failover", "power", "bounce", "drift"]  # the seed's faults, as found
    assert r.beyond_kinds()  # the power cut's loss is still there, reported apart
    assert r.ok, r.report()
