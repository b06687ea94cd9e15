"""Seed 13637 of the long run (issue 25): `commit-backwards`, faults partition (b1|b3, 4.33 s for
17.9 s) and reset (b2, b3 at 8.18 s).

What happened (`python -m odradek.testing.sim --seed 13637`, on 9663a9b): b1 led
`__consumer_offsets-0` with ISR [1, 3, 2] and was cut from b3, so its high watermark stood
still until the ISR shrank at 15.0 s. member-2.1's commit A (p0 17, p1 14) was appended at
4.86 s and answered REQUEST_TIMED_OUT at 9.86 s; the member's heartbeat, pipelined behind it on
the same connection, then waited for the shard's last written offset (an answer that writes
nothing waits for what it shows to be committed) until 14.86 s; the member resent A behind it
at 9.96 s. At 14.56 s the member's own deadline for A passed: it closed that connection, and on
a new one committed B (p0 17, p1 17), acknowledged at 15.02 s. The broker, which had already
read the resent A from the closed connection, ran it at 15.02 s, after B: the group's offset of
p1 went back to 14. The fix (broker/connection.py `_abandoned`): requests read ahead from a
connection its client then closed are not run (only an acks=0 Produce is: its client counted it
as sent). Kafka 4.4 would run it too (tests/reference/test_closed_connection_reference.py): a
deliberate difference. The exact case: tests/inprocess/broker/test_closed_connection.py.
"""

from __future__ import annotations

from odradek.testing.sim.profiles import PROFILES
from odradek.testing.sim.run import run_seed


def test_seed_13637_a_commit_resent_on_a_connection_the_member_closed_does_not_undo_a_later_one():
    r = run_seed(13637, PROFILES["ci"])
    assert [f.kind for f in r.schedule] == ["partition", "reset"]  # the seed's faults, as found
    assert r.ok, r.report()
