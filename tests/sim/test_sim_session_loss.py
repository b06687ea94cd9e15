"""A broker that loses its ZooKeeper session while it runs (not restarting) gets back into every
ISR once it has registered again (issue 25, branch session-window).

Scripted (a `Fault(at, "script", arg=fn)`): the interleaving is pinned down by the script, not
left to a seed's draw, and the script records what shows it happened.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from kazoo.exceptions import ConnectionLoss

from odradek.cluster import zk_layout as L
from odradek.testing.sim.faults import Fault
from odradek.testing.sim.profiles import PROFILES
from odradek.testing.sim.run import run_seed
from odradek.testing.sim.runner import FaultRunner
from odradek.testing.sim.zk import ZK

# long enough for the script: a follower out of the ISR (replica.lag.time.max.ms 10 s), its
# session lost (6 s), then 25 s to see every ISR whole again
OPTS = dataclasses.replace(PROFILES["ci"], duration=70.0, settle=20.0)
TOPICS = (OPTS.workload.topic, "__consumer_offsets", "__transaction_state")
LAG_S = 1.5  # each way, between the controller and ZooKeeper: its watches come this late
WHOLE_WITHIN_S = 25.0


async def session_lost_as_proposed(r: FaultRunner, f: Fault) -> None:
    """Follower F of partition p (led by L, neither the controller C) falls out of p's ISR (its
    link to L cut); C's link to ZooKeeper becomes slow; F is cut from ZooKeeper, and the moment
    its session expires (its registration deleted) its link to L heals: L sees it fetch, caught
    up, and proposes it back to the ISRs it leads, while C's view still shows F registered.
    Then F's ZooKeeper link heals (it registers again) and C's link is back to normal."""
    c = r.c
    controller = c.controller()
    pick = next(((pv.partition, pv.leader) for pv in c.partitions(r.topic) if pv.leader not in (controller, -1)), None)
    if pick is None:
        return
    p, leader = pick
    follower = ({1, 2, 3} - {controller, leader}).pop()
    r.notes["roles"] = {"partition": p, "leader": leader, "controller": controller, "follower": follower}
    r.cut(leader, follower)
    r.notes["out_of_isr"] = await r.until(lambda: follower not in getattr(r.view(p), "isr", ()), 30)
    c.net.set_latency(f"b{controller}", ZK, LAG_S)
    c.net.set_latency(ZK, f"b{controller}", LAG_S)

    def on_zk(op: str, path: str, data: bytes | None) -> None:
        if op == "delete" and path == L.broker_path(follower):
            r.notes["registration_gone_at"] = c.loop.elapsed
            r.heal(leader, follower)
            c.zk.hooks.remove(on_zk)

    c.zk.hooks.append(on_zk)
    r.cut_zk(follower)
    await r.until(lambda: on_zk not in c.zk.hooks, 20)
    await r.until(lambda: False, 3 * LAG_S + 1)
    r.heal_zk(follower)
    c.net.set_latency(f"b{controller}", ZK, None)
    c.net.set_latency(ZK, f"b{controller}", None)

    def short() -> list[Any]:
        return [(t, pv.partition, pv.isr) for t in TOPICS for pv in c.partitions(t) if set(pv.isr) != set(pv.replicas)]

    start = c.loop.elapsed
    whole = await r.until(lambda: not short(), WHOLE_WITHIN_S)
    r.notes["whole_after"] = round(c.loop.elapsed - start, 2) if whole else None
    r.notes["short"] = short()


def test_a_follower_whose_session_ends_as_its_leader_proposes_it_gets_back_into_the_isr():
    """Seeds 1 and 3 (scripted): the controller, its watches lagging, accepted L's proposal of F
    (AlterPartition's checks passed against its view), but the write's check that every ISR
    member is still registered found F's registration gone, and ZooKeeper refused it. The
    controller answered INVALID_UPDATE_VERSION, which tells the leader the controller has a
    newer state: L kept the proposal pending until the metadata brought that state, and none
    ever came (F was not in the ISR: its loss changed no state), so L never proposed F again:
    __transaction_state-1 stayed [3, 2] for good. Now the controller answers
    INELIGIBLE_REPLICA (not applied, the partition epoch current: Kafka's answer for a member
    that is not eligible), L proposes F again once it fetches under its new registration."""
    results = [
        run_seed(seed, OPTS, faults=[Fault(1.0, "script", arg=session_lost_as_proposed)], log_level=logging.INFO)
        for seed in (1, 2, 3, 4)
    ]
    for r in results:
        assert r.notes.get("out_of_isr") and "registration_gone_at" in r.notes, (r.seed, r.notes)
        assert r.notes.get("whole_after") is not None, (r.seed, r.notes)
    # the interleaving happened: a proposal naming a registration gone since the controller's view
    refusals = sum(n for r in results for t, n in r.templates.items() if "is no longer registered" in t)
    assert refusals > 0


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
