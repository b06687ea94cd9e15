"""The asyncio client: `AIOProducer`, `AIOConsumer`, `AIOAdmin`."""

from .producer import AIOProducer

__all__ = ["AIOProducer"]
