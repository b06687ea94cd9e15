"""What makes the simulator cheaper must not change what a run is: the trace's digest, the
tasks a killed node leaves, the clocks seen by code imported between runs (issue 25)."""

from __future__ import annotations

import asyncio
import hashlib
import sys
import time
import types

from odradek.testing.sim import trace as trace_module
from odradek.testing.sim.loop import NODE, Node, SimLoop, simulated_world
from odradek.testing.sim.trace import Trace


def test_the_digest_is_that_of_every_line_whatever_the_batching():
    lines = [f"{i * 0.001:.6f} b1>b2 b2:9092 {i}" for i in range(3 * trace_module._BATCH + 7)]
    h = hashlib.sha256()
    for line in lines:
        h.update(line.encode() + b"\n")
    t = Trace(keep=True)
    for line in lines:
        t.add(line)
    assert t.digest() == h.hexdigest()
    assert t.digest() == h.hexdigest()  # asking twice changes nothing
    assert t.lines == lines and t.count == len(lines)
    t.close()
    t.add("after the run")
    assert t.digest() == h.hexdigest()
    assert Trace().digest() == hashlib.sha256().hexdigest()


def test_a_killed_node_keeps_a_pending_task_made_before_many_finished_ones():
    loop = SimLoop()
    node = Node("b1")
    ran: list[str] = []

    async def forever() -> None:
        try:
            await asyncio.sleep(3600)
        finally:
            ran.append("finally")

    async def quick() -> None:
        await asyncio.sleep(0.001)

    async def main() -> None:
        token = NODE.set(node)
        try:
            pending = asyncio.ensure_future(forever())
            for _ in range(500):
                await asyncio.ensure_future(quick())
        finally:
            NODE.reset(token)
        assert len(node.tasks) < 200  # finished tasks are dropped as the list grows
        loop.kill(node)
        assert pending in loop.graveyard and not pending.done()
        assert [t for t in loop.graveyard if t.done()] == []
        await asyncio.sleep(10)

    asyncio.set_event_loop(loop)
    try:
        with simulated_world(loop, 1):
            loop.run_until_complete(main())
    finally:
        asyncio.set_event_loop(None)
    assert ran == []  # never resumed, never collected mid-run
    loop.bury()
    loop.close()
    assert ran == ["finally"]


def test_clock_defaults_of_code_imported_between_runs_are_virtual_in_the_next():
    def one_run(check) -> None:  # noqa: ANN001
        loop = SimLoop()
        asyncio.set_event_loop(loop)
        try:
            with simulated_world(loop, 1):
                check()
        finally:
            asyncio.set_event_loop(None)
            loop.close()

    from odradek.storage.manager import LogManager

    real = (time.time, time.monotonic)

    def rebound(fn) -> bool:  # noqa: ANN001
        values = (*(fn.__defaults__ or ()), *(fn.__kwdefaults__ or {}).values())
        return not any(v is r for v in values for r in real)

    one_run(lambda: None)
    mod = types.ModuleType("odradek.testing.sim._speed_probe")
    exec("import time\ndef stamp(clock=time.time):\n    return clock()\n", mod.__dict__)  # noqa: S102
    sys.modules[mod.__name__] = mod
    try:
        seen: list[float] = []
        one_run(lambda: (seen.append(mod.stamp()), seen.append(float(rebound(LogManager.__init__)))))
        assert seen[0] == 1_767_225_600.0 and seen[1] == 1.0  # the virtual wall clock at t=0
        seen.clear()
        one_run(lambda: (seen.append(mod.stamp()), seen.append(float(rebound(LogManager.__init__)))))
        assert seen == [1_767_225_600.0, 1.0]  # the scan kept from the run before
        assert mod.stamp.__defaults__ == (time.time,)  # restored after each run
        assert mod.stamp() != 1_767_225_600.0
    finally:
        del sys.modules[mod.__name__]
