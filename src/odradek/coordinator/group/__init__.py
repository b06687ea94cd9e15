"""The group coordinator over `__consumer_offsets`: the service the handlers call
(coordinator.py), one shard per partition (shard.py) composing the classic groups
(classic_group.py, classic_groups.py, classic_join.py) and the offsets (offsets.py), their
requests and answers (requests.py), settings (config.py) and record format (records.py)."""

from odradek.coordinator.group.config import GroupConfig
from odradek.coordinator.group.coordinator import GroupCoordinator

__all__ = ["GroupConfig", "GroupCoordinator"]
