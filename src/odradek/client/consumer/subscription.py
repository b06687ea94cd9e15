"""Which partitions the consumer reads and where it is in each (one owner: the consumer's loop)."""

from __future__ import annotations

import collections
import re
from typing import Any, NamedTuple


class TopicPartition(NamedTuple):
    topic: str
    partition: int


class OffsetAndMetadata(NamedTuple):
    offset: int
    metadata: str = ""
    leader_epoch: int = -1


class OffsetAndTimestamp(NamedTuple):
    offset: int
    timestamp: int


class ConsumerGroupMetadata(NamedTuple):
    """What a transactional producer's `send_offsets_to_transaction` needs of the consumer's
    group (Java's ConsumerGroupMetadata): the coordinator fences a commit from a member that
    left or a generation that ended (KIP-447)."""

    group_id: str
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None


class PartitionState:
    __slots__ = (
        "position",
        "paused",
        "reset_to",
        "epoch",
        "buffer",
        "high_watermark",
        "log_start_offset",
        "last_stable_offset",
        "fetching",
        "error",
        "ahead",
    )

    def __init__(self) -> None:
        self.position: int | None = None
        self.paused = False
        self.reset_to: str | None = None  # "earliest"/"latest" when a reset is pending
        self.epoch = 0  # bumped on seek: in-flight fetches for older epochs are dropped
        self.buffer: collections.deque = collections.deque()  # [records, index, next_offset]
        self.high_watermark = -1
        self.log_start_offset = -1
        self.last_stable_offset = -1
        self.fetching = False
        self.error: BaseException | None = None
        self.ahead: int | None = None  # next offset of a response being decoded (already fetched on)

    def clear_buffer(self) -> None:
        self.buffer.clear()
        self.ahead = None
        self.epoch += 1

    def seek(self, offset: int) -> None:
        self.position = offset
        self.reset_to = None
        self.error = None
        self.clear_buffer()

    @property
    def fetch_position(self) -> int | None:
        if self.ahead is not None:
            return self.ahead
        if self.buffer:
            return self.buffer[-1][2]
        return self.position

    @property
    def buffered(self) -> int:
        return sum(len(b[0]) - b[1] for b in self.buffer)


class SubscriptionState:
    def __init__(self) -> None:
        self.topics: set[str] = set()
        self.pattern: re.Pattern | None = None
        self.exclude: re.Pattern | None = None
        self.manual = False
        self.assignment: dict[TopicPartition, PartitionState] = {}
        self.listener: Any = None
        self.version = 0  # bumped on every assignment change

    @property
    def subscribed(self) -> bool:
        return bool(self.topics) or self.pattern is not None

    def subscribe(self, topics=None, pattern=None, exclude=None, listener=None) -> None:
        if self.manual and self.assignment:
            raise ValueError("subscribe() after assign(): call unsubscribe() first")
        self.manual = False
        self.topics = set(topics or ())
        self.pattern = re.compile(pattern) if isinstance(pattern, str) else pattern
        self.exclude = re.compile(exclude) if isinstance(exclude, str) else exclude
        self.listener = listener

    def matches(self, topic: str) -> bool:
        if self.pattern is not None:
            if not self.pattern.fullmatch(topic):
                return False
            return self.exclude is None or not self.exclude.fullmatch(topic)
        return topic in self.topics

    def assign_from_subscription(self, tps) -> None:
        new = {}
        for tp in tps:
            tp = TopicPartition(*tp)
            new[tp] = self.assignment.get(tp) or PartitionState()
        self.assignment = new
        self.version += 1

    def assign_manual(self, tps) -> None:
        if self.subscribed:
            raise ValueError("assign() while subscribed: call unsubscribe() first")
        self.manual = True
        self.assign_from_subscription(tps)

    def unsubscribe(self) -> None:
        self.topics = set()
        self.pattern = None
        self.exclude = None
        self.manual = False
        self.assignment = {}
        self.version += 1

    def state(self, tp) -> PartitionState:
        tp = TopicPartition(*tp)
        st = self.assignment.get(tp)
        if st is None:
            raise ValueError(f"{tp.topic}-{tp.partition} is not assigned to this consumer")
        return st

    def fetchable(self):
        for tp, st in self.assignment.items():
            if not st.paused and st.position is not None and st.reset_to is None and st.error is None:
                yield tp, st
