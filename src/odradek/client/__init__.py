"""odradek's Python Kafka client.

Blocking: ``from odradek.client import Producer, Consumer, Admin``.
asyncio:  ``from odradek.client.aio import AIOProducer, AIOConsumer, AIOAdmin``.
See docs/client.md.
"""

from ._records import ConsumerRecord
from .aio.admin import NewTopic
from .aio.admin_security import (
    AclBinding,
    AclBindingFilter,
    ScramCredentialInfo,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from .consumer.assignors import CooperativeStickyAssignor, RangeAssignor, RoundRobinAssignor
from .consumer.subscription import ConsumerGroupMetadata, OffsetAndMetadata, OffsetAndTimestamp, TopicPartition
from .producer.accumulator import FutureRecordMetadata, RecordMetadata
from .producer.partitioner import DefaultPartitioner, RoundRobinPartitioner, murmur2
from .sync import Admin, Consumer, Producer

__all__ = [
    "Producer",
    "Consumer",
    "Admin",
    "ConsumerRecord",
    "RecordMetadata",
    "FutureRecordMetadata",
    "TopicPartition",
    "OffsetAndMetadata",
    "OffsetAndTimestamp",
    "ConsumerGroupMetadata",
    "NewTopic",
    "AclBinding",
    "AclBindingFilter",
    "ScramCredentialInfo",
    "UserScramCredentialUpsertion",
    "UserScramCredentialDeletion",
    "DefaultPartitioner",
    "RoundRobinPartitioner",
    "murmur2",
    "RangeAssignor",
    "RoundRobinAssignor",
    "CooperativeStickyAssignor",
]
