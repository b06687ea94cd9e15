"""Named sizes of a run. A seed replays exactly only under the profile it ran with (the report
prints the command).

- `ci`: what CI runs several hundred of (tests/sim/test_ci_batch.py): 15 simulated seconds of
  faults and workload, a modest rate, then healing and the checks;
- `full`: longer, busier runs, for the long run in bench/sim.
"""

from __future__ import annotations

from odradek.testing.sim.faults import FaultSpec
from odradek.testing.sim.run import SimOptions
from odradek.testing.sim.workload import WorkloadSpec

PROFILES: dict[str, SimOptions] = {
    "ci": SimOptions(
        duration=15.0,
        workload=WorkloadSpec(rate=5.0, txn_interval=1.0, readers=(None,)),
        faults=FaultSpec(counts=(1, 2, 2, 3, 3), window=(1.0, 13.0)),
    ),
    "full": SimOptions(),
}
