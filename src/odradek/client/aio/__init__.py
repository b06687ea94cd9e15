"""The asyncio client: `AIOProducer`, `AIOConsumer`, `AIOAdmin`."""

from ..consumer.subscription import OffsetAndMetadata, OffsetAndTimestamp, TopicPartition
from .._records import ConsumerRecord
from ..producer.accumulator import RecordMetadata
from .consumer import AIOConsumer
from .producer import AIOProducer

__all__ = ["AIOProducer", "AIOConsumer", "ConsumerRecord", "RecordMetadata", "TopicPartition",
           "OffsetAndMetadata", "OffsetAndTimestamp"]
