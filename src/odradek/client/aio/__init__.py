"""The asyncio client: `AIOProducer`, `AIOConsumer`, `AIOAdmin`."""

from .._records import ConsumerRecord
from ..consumer.subscription import OffsetAndMetadata, OffsetAndTimestamp, TopicPartition
from ..producer.accumulator import RecordMetadata
from .admin import AIOAdmin, NewTopic
from .consumer import AIOConsumer
from .producer import AIOProducer

__all__ = [
    "AIOProducer",
    "AIOConsumer",
    "AIOAdmin",
    "NewTopic",
    "ConsumerRecord",
    "RecordMetadata",
    "TopicPartition",
    "OffsetAndMetadata",
    "OffsetAndTimestamp",
]
