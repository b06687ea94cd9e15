"""Classic consumer groups: a sans-IO state machine (state.py, offsets.py) rebuilt by
replaying __consumer_offsets (records.py), and its asyncio runtime (runtime.py)."""

from odradek.coordinator.group.runtime import GroupCoordinator

__all__ = ["GroupCoordinator"]
