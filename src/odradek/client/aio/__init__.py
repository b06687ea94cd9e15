"""The asyncio client: `AIOProducer`, `AIOConsumer`, `AIOAdmin`."""

from .._records import ConsumerRecord
from ..consumer.subscription import OffsetAndMetadata, OffsetAndTimestamp, TopicPartition
from ..producer.accumulator import RecordMetadata
from .admin import AIOAdmin, NewTopic
from .admin_security import (
    AclBinding,
    AclBindingFilter,
    ScramCredentialInfo,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from .consumer import AIOConsumer
from .producer import AIOProducer

__all__ = [
    "AIOProducer",
    "AIOConsumer",
    "AIOAdmin",
    "NewTopic",
    "AclBinding",
    "AclBindingFilter",
    "ScramCredentialInfo",
    "UserScramCredentialUpsertion",
    "UserScramCredentialDeletion",
    "ConsumerRecord",
    "RecordMetadata",
    "TopicPartition",
    "OffsetAndMetadata",
    "OffsetAndTimestamp",
]
