"""A broker that loses its ZooKeeper session while it runs (not restarting) gets back into every
ISR once it has registered again (issue 25).

Scripted (a `Fault(at, "script", arg=fn)`): the interleaving is pinned down by the script, not
left to a seed's draw, and the script records what shows it happened.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from kazoo.exceptions import ConnectionLoss

from odradek.cluster import zk_layout as L
from odradek.testing.sim.faults import Fault
from odradek.testing.sim.profiles import PROFILES
from odradek.testing.sim.run import run_seed
from odradek.testing.sim.runner import FaultRunner

# long enough for the script: a follower out of the ISR (replica.lag.time.max.ms 10 s), its
# session lost (6 s), then 25 s to see every ISR whole again
OPTS = dataclasses.replace(PROFILES["ci"], duration=70.0, settle=20.0)
TOPICS = (OPTS.workload.topic, "__consumer_offsets", "__transaction_state")

WHOLE_WITHIN_S = 25.0


async def registration_dropped_once(r: FaultRunner, f: Fault) -> None:
    """A follower F (not the controller) is cut from ZooKeeper until its session expires, then
    healed: kazoo opens a new session and F registers again, and the connection drops under
    that first attempt (ConnectionLoss, injected into F's ZooKeeper client once, as a loaded
    machine drops it). kazoo reconnects with the same session: no new LOST asks again."""
    c = r.c
    controller = c.controller()
    follower = max({1, 2, 3} - {controller})
    r.notes["follower"] = follower
    client: Any = c.host(follower).broker.zk  # type: ignore[union-attr]
    create = client.create

    def dropping(path: str, *args: Any, **kwargs: Any) -> Any:
        if path == L.broker_path(follower) and "dropped_at" not in r.notes:
            r.notes["dropped_at"] = c.loop.elapsed
            raise ConnectionLoss()
        return create(path, *args, **kwargs)

    client.create = dropping
    r.cut_zk(follower)
    r.notes["registration_gone"] = await r.until(lambda: follower not in c.registered(), 20)
    r.heal_zk(follower)

    def short() -> list[Any]:
        return [(t, pv.partition, pv.isr) for t in TOPICS for pv in c.partitions(t) if set(pv.isr) != set(pv.replicas)]

    start = c.loop.elapsed
    whole = await r.until(lambda: follower in c.registered() and not short(), WHOLE_WITHIN_S)
    r.notes["whole_after"] = round(c.loop.elapsed - start, 2) if whole else None
    r.notes["short"] = short()


def test_a_broker_whose_registration_after_its_session_expired_fails_registers_again():
    """Run 5 of the cluster group on branch session-window (test_a_broker_cut_from_zookeeper_alone,
    two clusters loading the machine): brokers 1 and 2 lost their 2 s sessions, the first
    attempt to register again failed with ConnectionLoss ("re-registering broker 1 failed"),
    and nothing tried again: they ran unregistered, out of every ISR, until the test ended.
    Now the registration is tried again until it is made (zookeeper.py `_reregister`)."""
    r = run_seed(1, OPTS, faults=[Fault(2.0, "script", arg=registration_dropped_once)])
    assert r.notes.get("registration_gone") and "dropped_at" in r.notes, r.notes
    assert r.notes.get("whole_after") is not None, r.notes
