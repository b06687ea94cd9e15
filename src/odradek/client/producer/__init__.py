"""Producer internals: accumulator (batching), sender (background Produce loop), partitioners."""

from .accumulator import FutureRecordMetadata, RecordMetadata
from .partitioner import DefaultPartitioner, RoundRobinPartitioner, murmur2

__all__ = ["FutureRecordMetadata", "RecordMetadata", "DefaultPartitioner", "RoundRobinPartitioner", "murmur2"]
