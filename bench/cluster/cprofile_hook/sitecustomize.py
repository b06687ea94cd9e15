"""cProfile of a broker's event-loop thread on signal, for bench/cluster/diagnose.py --profile.

On PYTHONPATH (first) of a broker process with ODRADEK_CPROFILE_DIR set: SIGUSR1 starts a fresh
profile of the main thread (the broker's event loop), SIGUSR2 stops it and writes
``$ODRADEK_CPROFILE_DIR/<pid>-<n>.prof`` (pstats), so that only the loaded run is profiled.
Nothing happens without the variable. With ODRADEK_CPROFILE_CLOCK=thread the profile counts the
thread's CPU time (`time.thread_time`) instead of the wall clock, so that time spent descheduled
inside a system call on a busy machine is not charged to it.
"""

from __future__ import annotations

import cProfile
import os
import signal
import time

_dir = os.environ.get("ODRADEK_CPROFILE_DIR")
if _dir:
    _state: dict[str, object] = {"prof": None, "n": 0}

    def _start(_sig: int, _frame: object) -> None:
        clock = os.environ.get("ODRADEK_CPROFILE_CLOCK")
        prof = cProfile.Profile(time.thread_time) if clock == "thread" else cProfile.Profile()
        _state["prof"] = prof
        prof.enable()

    def _stop(_sig: int, _frame: object) -> None:
        prof = _state["prof"]
        if isinstance(prof, cProfile.Profile):
            prof.disable()
            n = _state["n"] = int(str(_state["n"])) + 1
            prof.dump_stats(os.path.join(_dir, f"{os.getpid()}-{n}.prof"))
            _state["prof"] = None

    signal.signal(signal.SIGUSR1, _start)
    signal.signal(signal.SIGUSR2, _stop)
