"""Seed 16493 of the long run (issue 25): `commit-backwards`, faults slow-link (b1, 1.67 s) and
zk-cut (b3 from ZooKeeper, 5.56 s for 14.5 s).

What happened (`python -m odradek.testing.sim --seed 16493`, on fadc9db): b3 led t-2 when it was
cut from ZooKeeper; at 10.01 s the controller made b1 leader at epoch 1, and member-1.2 consumed
p2 from b1 up to offset 50 and committed 43. b3, still believing it led at epoch 0 (its view
frozen while cut), answered a Metadata request naming itself; the consumer took that older view,
fetched offset 50 from b3, whose log ended below it, got OFFSET_OUT_OF_RANGE, reset to the
earliest offset (auto.offset.reset=earliest) and committed 37. The fix is in odradek's client
(KIP-320, as Java's): metadata never goes back to an older leader epoch of a partition
(client/cluster.py `_keep_newer_leaders`), and Fetch and ListOffsets carry the leader epoch, so a
broker on another epoch refuses them (FENCED_/UNKNOWN_LEADER_EPOCH, then a metadata refresh).
Unit test: tests/unit/client/test_metadata_epochs.py.
"""

from __future__ import annotations

from odradek.testing.sim.profiles import PROFILES
from odradek.testing.sim.run import run_seed


def test_seed_16493_a_deposed_leaders_metadata_does_not_send_the_consumer_back_to_it():
    r = run_seed(16493, PROFILES["ci"])
    assert [f.kind for f in r.schedule] == ["slow-link", "zk-cut"]  # the seed's faults, as found
    assert r.ok, r.report()
