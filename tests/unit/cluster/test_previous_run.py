"""A broker started again while its previous run's ZooKeeper session still stands (issue 25,
sim seeds 26 and 162 of the CI batch): the decisions that keep the previous run's registration
from counting for the new run, on hand-made states, no ZooKeeper.

- the new run ends the previous registration first and registers only once the controller
  has fenced that broker epoch (`previous_run_fenced`);
- every partition state the controller writes checks that its ISR members are still
  registered (`controller_writes.registered`), so a controller whose watches lag the deletion writes nothing
  that admits the previous run;
- when every in-sync replica restarted, the one that kept its page cache leads before one
  whose host booted again (`may_lack_unflushed`), alone in the ISR.
"""

from __future__ import annotations

import json

import pytest

from odradek.cluster import zk_layout as L
from odradek.cluster.controller_writes import registered, unregistered
from odradek.cluster.decisions import decide, reconcile_partition
from odradek.cluster.metadata import BrokerInfo
from odradek.cluster.zk_cache import CachedState, CacheView
from odradek.cluster.zookeeper import previous_run_fenced

EPOCH = 7
NOW = {1: 1001, 2: 1002, 3: 1003}
OLD = {1: 901, 2: 902, 3: 903}  # the registrations before each broker restarted


def ps(leader: int, isr: tuple[int, ...], epochs: tuple[int, ...] | None, leader_epoch: int = 4) -> L.PartitionState:
    return L.PartitionState(leader, leader_epoch, isr, EPOCH, epochs)


def view(*states: L.PartitionState) -> CacheView:
    v = CacheView()
    v.states = {("t", p): CachedState(st, 3) for p, st in enumerate(states)}
    return v


# --------------------------------------------------------- the registration
def test_a_registration_names_its_log_directories_and_whether_it_may_lack_unflushed_data():
    info = BrokerInfo(1, "b1", 9092, None, (("PLAINTEXT", "b1", 9092),), directory_ids=("d-1", "d-2"))
    data = L.encode_broker(info)
    assert json.loads(data)["directory_ids"] == ["d-1", "d-2"] and "may_lack_unflushed" not in json.loads(data)
    assert L.decode_broker(1, data) == info
    lost = BrokerInfo(
        1, "b1", 9092, None, (("PLAINTEXT", "b1", 9092),), directory_ids=("d-1",), may_lack_unflushed=True
    )
    assert L.decode_broker(1, L.encode_broker(lost)) == lost
    # Kafka's own registration (version 5) has neither: no directories, nothing said lost
    kafka = b'{"features":{},"listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT"},"endpoints":["PLAINTEXT://b1:9092"],"jmx_port":-1,"port":9092,"host":"b1","version":5,"timestamp":"1"}'
    decoded = L.decode_broker(1, kafka)
    assert decoded.directory_ids == () and decoded.may_lack_unflushed is False


# ------------------------------------------------ waiting for the previous epoch to be fenced
def test_the_previous_run_is_fenced_once_no_state_counts_it_live_and_in_sync():
    follower = ps(2, (2, 1, 3), (1002, OLD[1], 1003))
    assert not previous_run_fenced(view(follower), 1, OLD[1])
    assert previous_run_fenced(view(ps(2, (2, 3), (1002, 1003))), 1, OLD[1])
    # a partition it led is not fenced until the controller moved its leadership
    assert not previous_run_fenced(view(ps(1, (1, 2), (OLD[1], 1002))), 1, OLD[1])
    assert not previous_run_fenced(view(ps(1, (2,), (1002,))), 1, OLD[1])
    # a state Kafka wrote (no epochs): in its ISR at all is not fenced
    assert not previous_run_fenced(view(ps(2, (2, 1), None)), 1, OLD[1])
    # admitted with another registration (an earlier one the controller bounced and admitted again): fenced
    assert previous_run_fenced(view(ps(2, (2, 1), (1002, 1001))), 1, OLD[1])
    # a leaderless partition keeps its last ISR, as Kafka's: nothing to wait for
    assert previous_run_fenced(view(ps(-1, (1,), (OLD[1],))), 1, OLD[1])
    assert not previous_run_fenced(view(follower, ps(2, (2, 3), (1002, 1003))), 1, OLD[1])


# ---------------------------------------------- the controller's writes check registrations
def test_a_state_with_a_leader_is_written_only_while_its_isr_members_are_registered():
    assert registered(ps(2, (2, 1, 3), (1002, 1001, 1003))) == [
        ("check", (L.broker_path(b),), {"version": -1}) for b in (2, 1, 3)
    ]
    assert registered(ps(-1, (1,), (901,))) == []  # the memory of a leaderless partition


def test_a_refused_registration_check_names_its_broker():
    """AlterPartition answers INELIGIBLE_REPLICA for a write refused by a registration check
    (the member went after the view the change was decided from), INVALID_UPDATE_VERSION for
    one refused by its version check (controller.alter_partition)."""
    st = ps(2, (2, 1, 3), (1002, 1001, 1003))
    assert [unregistered(op) for op in registered(st)] == [2, 1, 3]
    write = ("set_data", (L.partition_state_path("t", 0), L.encode_partition_state(st)), {"version": 4})
    assert unregistered(write) == -1
    assert unregistered(("check", (L.CONTROLLER_EPOCH,), {"version": 3})) == -1


# --------------------------------------------- every in-sync replica restarted: who leads
@pytest.mark.parametrize(
    "replicas,live,lost,expected",
    [
        # sim seed 162: 3 lost power, 1 and 2 were killed (page cache kept); 2 not back yet
        ((2, 3, 1), {1, 3}, {3}, (1, (1,), True)),
        # none kept its page cache: the first in-sync replica back, as Kafka's controller
        ((2, 3, 1), {1, 3}, {1, 3}, (3, (3,), True)),
        ((2, 3, 1), {1, 3}, set(), (3, (3,), True)),
        # one lost power, alone back: it leads (the others' data comes back when they do)
        ((2, 3, 1), {3}, {3}, (3, (3,), True)),
    ],
)
def test_among_restarted_in_sync_replicas_one_that_kept_its_page_cache_leads(replicas, live, lost, expected):
    st = ps(2, (2, 3, 1), (902, 903, 901))
    assert decide(st, replicas, live, bounced=live, unclean=False, lost=lost) == expected


def test_a_new_controller_elects_the_replica_that_kept_its_page_cache_alone_in_the_isr():
    """Sim seed 162: no controller acted while 3 lost power, 1 and then 2 were killed (each a
    zombie controller in turn); the next one finds the ISR [2, 3, 1] as the first state wrote
    it, 1 and 3 registered again, 2 not yet. 3 came first in the assignment and led with the
    log its power cut left; now 1 leads alone, and 3 rejoins once it has caught up."""
    st = ps(2, (2, 3, 1), (902, 903, 901), leader_epoch=0)
    sessions = {1: 1001, 3: 1003}
    new = reconcile_partition(st, (2, 3, 1), {1, 3}, sessions, set(), EPOCH, unclean=False, lost={3})
    assert new == ps(1, (1,), (1001,), leader_epoch=1)
    assert reconcile_partition(new, (2, 3, 1), {1, 3}, sessions, set(), EPOCH, unclean=False, lost={3}) is None
