"""Named sizes of a run. A seed replays exactly only under the profile it ran with (the report
prints the command).

- `ci`: what CI runs several hundred of (tests/sim/test_sim_ci_batch.py): 15 simulated seconds
  of faults and workload, a modest rate, then healing and the checks;
- `full`: longer, busier runs, for the long run in bench/sim.

Both keep segments small (1 KiB for the workload's topic, 4 KiB for the internal topics), so
logs roll every few seconds: flush at roll, recovery points, the leader-epoch checkpoint and
loading across segments are crossed by kills and power cuts. Both run a consumer group
(two members in `ci`, three in `full`).
"""

from __future__ import annotations

from odradek.testing.sim.faults import FaultSpec
from odradek.testing.sim.run import SimOptions
from odradek.testing.sim.workload import WorkloadSpec

PROFILES: dict[str, SimOptions] = {
    "ci": SimOptions(
        duration=15.0,
        internal_segment_bytes=4096,
        workload=WorkloadSpec(rate=5.0, txn_interval=1.0, readers=(None,), segment_bytes=1024, group_members=2),
        faults=FaultSpec(scale=0.85, window=(1.0, 13.0)),
    ),
    "full": SimOptions(
        internal_segment_bytes=4096,
        workload=WorkloadSpec(segment_bytes=1024, group_members=3),
    ),
}
