"""The simulator's event loop: virtual time, nodes paused and killed, inline to_thread, patched clocks."""

from __future__ import annotations

import asyncio
import contextvars
import random
import time
import uuid

import pytest

from odradek.testing.sim.loop import (
    MONO_BASE,
    NODE,
    WALL_EPOCH,
    Node,
    SimDeadlock,
    SimLoop,
    WouldBlock,
    simulated_world,
)


def run(loop: SimLoop, coro, seed: int = 1):
    asyncio.set_event_loop(loop)
    try:
        with simulated_world(loop, seed):
            return loop.run_until_complete(coro)
    finally:
        asyncio.set_event_loop(None)
        loop.close()


def spawn_as(node: Node | None, coro) -> asyncio.Task:
    token = NODE.set(node)
    try:
        return asyncio.ensure_future(coro)
    finally:
        NODE.reset(token)


def test_an_hour_of_virtual_time_takes_no_real_time():
    loop = SimLoop()
    started = time.perf_counter()

    async def main():
        for _ in range(60):
            await asyncio.sleep(60)
        return loop.elapsed

    assert run(loop, main()) == pytest.approx(3600)
    assert time.perf_counter() - started < 1.0


def test_clocks_are_virtual_during_the_run_and_real_after():
    loop = SimLoop()
    seen = {}

    async def main():
        await asyncio.sleep(10)
        seen["mono"] = time.monotonic()
        seen["wall"] = time.time()
        seen["ns"] = time.time_ns()

    before = time.time()
    run(loop, main())
    assert before <= time.time() < before + 60  # the real clock is back
    assert seen["mono"] == pytest.approx(MONO_BASE + 10)
    assert seen["wall"] == pytest.approx(WALL_EPOCH + 10)
    assert seen["ns"] // 10**9 == int(WALL_EPOCH + 10)


def test_each_node_sees_its_own_wall_clock_with_steps_and_drift():
    loop = SimLoop()
    a, b = Node("a"), Node("b")
    out: dict[str, list[float]] = {"a": [], "b": []}

    async def watch(name: str):
        for _ in range(3):
            await asyncio.sleep(100)
            out[name].append(round(time.time() - WALL_EPOCH, 3))

    async def main():
        loop.step_clock(b, 7200)  # two hours ahead
        loop.set_drift(a, 0.01)  # 1% fast from now on
        await asyncio.gather(spawn_as(a, watch("a")), spawn_as(b, watch("b")))

    run(loop, main())
    assert out["a"] == [101.0, 202.0, 303.0]
    assert out["b"] == [7300.0, 7400.0, 7500.0]


def test_a_paused_node_runs_nothing_until_resumed_then_all_its_late_timers_fire():
    loop = SimLoop()
    node = Node("b1")
    ticks: list[float] = []

    async def ticker():
        while True:
            await asyncio.sleep(1)
            ticks.append(round(loop.elapsed, 3))

    async def main():
        spawn_as(node, ticker())
        await asyncio.sleep(2.5)
        loop.pause(node)
        await asyncio.sleep(10)
        assert ticks == [1.0, 2.0]
        loop.resume(node)
        await asyncio.sleep(1.2)

    run(loop, main())
    assert ticks[:3] == [1.0, 2.0, 12.5]  # the sleep due at 3.0 ends when the node resumes
    assert ticks[3] == pytest.approx(13.5)


def test_a_killed_node_never_runs_again():
    loop = SimLoop()
    node = Node("b1")
    ticks: list[float] = []

    async def ticker():
        while True:
            await asyncio.sleep(1)
            ticks.append(loop.elapsed)

    async def main():
        spawn_as(node, ticker())
        await asyncio.sleep(3.5)
        loop.kill(node)
        await asyncio.sleep(10)

    run(loop, main())
    assert len(ticks) == 3


def test_to_thread_runs_inline_after_the_nodes_io_delay_and_keeps_the_node():
    loop = SimLoop(random.Random(3))
    node = Node("b1", io_delay=(0.5, 0.5), slow_io=4.0)

    async def work():
        before = loop.elapsed
        who = await asyncio.to_thread(lambda: NODE.get())
        return who, loop.elapsed - before

    async def main():
        return await spawn_as(node, work())

    who, took = run(loop, main())
    assert who is node
    assert took == pytest.approx(2.0, abs=0.001)


def test_a_function_that_would_block_runs_again_whole_when_it_can():
    loop = SimLoop()
    calls: list[float] = []
    waiting: list = []
    state = {"up": False}

    def fn():
        calls.append(loop.elapsed)
        if not state["up"]:
            raise WouldBlock(waiting.append, "link down")
        return "done"

    async def main():
        fut = asyncio.ensure_future(asyncio.to_thread(fn))
        await asyncio.sleep(5)
        assert not fut.done() and len(waiting) == 1
        state["up"] = True
        waiting.pop()()
        return await fut

    assert run(loop, main()) == "done"
    assert len(calls) == 2 and calls[1] >= 5


def test_charge_delays_the_result_not_the_effect():
    loop = SimLoop()
    effects: list[float] = []

    def fn():
        effects.append(loop.elapsed)
        loop.charge(0.25)
        return 1

    async def main():
        await asyncio.to_thread(fn)
        return loop.elapsed

    assert run(loop, main()) == pytest.approx(0.25, abs=0.001)
    assert effects[0] < 0.001


def test_round_trips_not_yet_begun_take_their_new_cost_when_costs_change():
    """Four 1 s round trips charged at once: after 1.5 s (the second under way) they become
    0.1 s each; the second keeps its second, the last two take 0.1 s: the result at 2.2 s, not
    4. A change after the last one began (four of 0.1 s, changed at 0.35 s) changes nothing."""
    loop = SimLoop()
    cost = {"now": 1.0}

    def fn():
        for _ in range(4):
            loop.charge(cost["now"], lambda: cost["now"])
        return "read"

    async def main():
        fut = asyncio.ensure_future(asyncio.to_thread(fn))
        await asyncio.sleep(1.5)
        cost["now"] = 0.1
        loop.costs_changed()
        assert await fut == "read"
        healed_at = loop.elapsed
        slow = asyncio.ensure_future(asyncio.to_thread(fn))
        await asyncio.sleep(0.35)  # the last round trip under way
        cost["now"] = 5.0
        loop.costs_changed()
        await slow
        return healed_at, loop.elapsed - healed_at

    healed_at, second = run(loop, main())
    assert healed_at == pytest.approx(2.2, abs=0.002)
    assert second == pytest.approx(0.4, abs=0.002)


def test_a_run_with_nothing_left_to_do_is_a_deadlock():
    loop = SimLoop()

    async def main():
        await loop.create_future()

    with pytest.raises(SimDeadlock):
        run(loop, main())


def test_uuid4_and_random_are_seeded_and_restored():
    def sample(seed: int):
        loop = SimLoop()

        async def main():
            return uuid.uuid4(), random.random()

        return run(loop, main(), seed)

    assert sample(5) == sample(5)
    assert sample(5) != sample(6)
    assert uuid.uuid4() != sample(5)[0]


def test_defaults_that_captured_the_real_clock_see_the_virtual_one():
    from odradek.storage.manager import LogManager

    loop = SimLoop()

    async def main():
        await asyncio.sleep(42)
        return LogManager.__init__.__defaults__ or LogManager.__init__.__kwdefaults__

    captured = run(loop, main())
    assert time.time not in tuple(captured.values() if isinstance(captured, dict) else captured)
    restored = LogManager.__init__.__defaults__ or ()
    assert any(v is time.time for v in (*restored, *(LogManager.__init__.__kwdefaults__ or {}).values()))


def test_call_soon_as_runs_the_callback_as_that_node():
    loop = SimLoop()
    node = Node("zk")
    seen = []

    async def main():
        loop.call_soon_as(node, lambda: seen.append(NODE.get()))
        ctx = contextvars.copy_context()
        assert ctx.get(NODE) is None
        await asyncio.sleep(0)

    run(loop, main())
    assert seen == [node]
