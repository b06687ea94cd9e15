"""Partition assignors run by the group leader: range, roundrobin, cooperative-sticky.

Names and behaviour follow the Java client's, so a group may mix Java and Python members:
the group picks a protocol (assignor name) every member offered, and the leader, whatever
its language, computes the assignment from Kafka's ConsumerProtocol subscriptions.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field


@dataclass
class MemberSubscription:
    member_id: str
    topics: list[str]
    owned: list[tuple[str, int]] = field(default_factory=list)
    generation: int = -1
    user_data: bytes | None = None
    group_instance_id: str | None = None


class Assignor:
    name = ""
    rebalance_protocol = "eager"  # or "cooperative"

    def user_data(self, assignment, generation: int) -> bytes | None:
        return None

    def assign(
        self, partitions: dict[str, int], subs: dict[str, MemberSubscription]
    ) -> dict[str, list[tuple[str, int]]]:
        raise NotImplementedError


class RangeAssignor(Assignor):
    """Per topic: members sorted by id; each gets n // m consecutive partitions, the first n % m one more."""

    name = "range"

    def assign(self, partitions, subs):
        out = {m: [] for m in subs}
        by_topic = defaultdict(list)
        for m, s in subs.items():
            for t in s.topics:
                by_topic[t].append(m)
        for topic, members in by_topic.items():
            n = partitions.get(topic)
            if not n:
                continue
            members.sort(key=lambda m: (subs[m].group_instance_id or m) if subs[m].group_instance_id else m)
            per, extra = divmod(n, len(members))
            start = 0
            for i, m in enumerate(members):
                count = per + (1 if i < extra else 0)
                out[m].extend((topic, p) for p in range(start, start + count))
                start += count
        return out


class RoundRobinAssignor(Assignor):
    """All partitions sorted by (topic, partition), dealt in turn to members subscribed to the topic."""

    name = "roundrobin"

    def assign(self, partitions, subs):
        out = {m: [] for m in subs}
        members = sorted(subs)
        if not members:
            return out
        i = 0
        for topic in sorted(partitions):
            for p in range(partitions[topic]):
                for _ in range(len(members)):
                    m = members[i % len(members)]
                    i += 1
                    if topic in subs[m].topics:
                        out[m].append((topic, p))
                        break
        return out


class CooperativeStickyAssignor(Assignor):
    """Balanced and sticky; a partition moving between members is first only revoked.

    Members keep what they owned (in the latest generation) up to their fair share; the
    rest is dealt to the least loaded subscribed members. A partition whose previous owner
    is still in the group is left out of its new owner's assignment this round: the owner
    revokes it, rejoins, and the next rebalance hands it over (KIP-429).
    """

    name = "cooperative-sticky"
    rebalance_protocol = "cooperative"

    def assign(self, partitions, subs):
        out: dict[str, list] = {m: [] for m in subs}
        if not subs:
            return out
        all_tps = [
            (t, p)
            for t in sorted(partitions)
            for p in range(partitions[t])
            if any(t in s.topics for s in subs.values())
        ]
        max_gen = max((s.generation for s in subs.values()), default=-1)
        prev_owner: dict[tuple, str] = {}
        for m, s in subs.items():
            if s.generation < max_gen and max_gen >= 0:
                continue
            for tp in s.owned:
                tp = (tp[0], tp[1])
                if tp not in prev_owner:
                    prev_owner[tp] = m
        total = len(all_tps)
        # quota: eligible members share what they can consume; simple when all subscribe alike
        counts = {m: 0 for m in subs}
        eligible_count = len(subs)
        base, extra = divmod(total, eligible_count) if eligible_count else (0, 0)
        ceil_quota = base + (1 if extra else 0)
        at_ceil = 0
        unassigned = []
        for tp in all_tps:
            m = prev_owner.get(tp)
            if m is not None and tp[0] in subs[m].topics:
                limit = base if at_ceil >= extra and counts[m] >= base else ceil_quota
                if counts[m] < limit:
                    out[m].append(tp)
                    counts[m] += 1
                    if counts[m] == ceil_quota and extra:
                        at_ceil += 1
                    continue
            unassigned.append(tp)
        for tp in unassigned:
            cands = [m for m in subs if tp[0] in subs[m].topics]
            if not cands:
                continue
            m = min(cands, key=lambda x: (counts[x], x))
            out[m].append(tp)
            counts[m] += 1
        # cooperative: do not hand over a partition its previous owner has not revoked yet
        for m, tps in out.items():
            out[m] = [tp for tp in tps if prev_owner.get(tp, m) == m or prev_owner.get(tp) not in subs]
        return out


ASSIGNORS = {a.name: a for a in (RangeAssignor, RoundRobinAssignor, CooperativeStickyAssignor)}


def make_assignors(spec) -> list[Assignor]:
    if isinstance(spec, str):
        spec = [s.strip() for s in spec.split(",") if s.strip()]
    out = []
    for s in spec:
        if isinstance(s, Assignor):
            out.append(s)
        elif isinstance(s, type) and issubclass(s, Assignor):
            out.append(s())
        else:
            name = str(s).rsplit(".", 1)[-1]
            java = {
                "RangeAssignor": "range",
                "RoundRobinAssignor": "roundrobin",
                "CooperativeStickyAssignor": "cooperative-sticky",
            }
            name = java.get(name, name)
            if name not in ASSIGNORS:
                raise ValueError(f"unknown partition.assignment.strategy {s!r}")
            out.append(ASSIGNORS[name]())
    if not out:
        raise ValueError("partition.assignment.strategy is empty")
    return out
